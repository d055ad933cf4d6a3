// The step profiler (runtime/profile.h): exclusive times per category, and a Conditioning
// scope claiming what runs inside it.
#include <catch2/catch.hpp>

#include <string>

#include "runtime/profile.h"

namespace {

namespace profile = dit::profile;

void spin(double seconds) {
  const int64_t end = profile::now_ns() + int64_t(seconds * 1e9);
  while (profile::now_ns() < end) {
  }
}

struct On {
  On() {
    profile::enable(true);
    profile::reset();
  }
  ~On() { profile::enable(false); }
};

double secs(const profile::Totals& t, profile::Cat c) { return t.seconds[int(c)]; }

}  // namespace

TEST_CASE("profile: nested scopes are exclusive and a conditioning scope claims what runs inside it", "[runtime][profile]") {
  // The expected times are the intervals this test measures around each scope, not the nominal
  // spins: a loaded machine (CI runs tests in parallel, under sanitizers) may preempt a spin for
  // many milliseconds, which both clocks see. Only the few instructions between the test's clock
  // reads and the scope's own are unaccounted for.
  On on;
  int64_t t[8];
  {
    t[0] = profile::now_ns();
    profile::Scope a(profile::Cat::Attention);
    spin(0.02);
    {
      t[1] = profile::now_ns();
      profile::Scope c(profile::Cat::Communication);
      spin(0.03);
    }
    t[2] = profile::now_ns();
  }
  t[3] = profile::now_ns();
  {
    t[4] = profile::now_ns();
    profile::Scope c(profile::Cat::Conditioning);
    spin(0.01);
    {
      profile::Scope l(profile::Cat::Linear);  // e.g. the adaLN linear: conditioning, not linear
      spin(0.02);
    }
  }
  t[5] = profile::now_ns();
  {
    t[6] = profile::now_ns();
    profile::Scope l(profile::Cat::Linear);
    spin(0.01);
  }
  t[7] = profile::now_ns();
  const profile::Totals got = profile::totals();
  auto s = [&](int a, int b) { return double(t[b] - t[a]) * 1e-9; };
  // Communication ran inside [t1, t2]; attention is the rest of [t0, t3].
  const double comm = secs(got, profile::Cat::Communication);
  CHECK(comm <= s(1, 2));
  CHECK(comm >= 0.03);
  CHECK(secs(got, profile::Cat::Attention) == Approx(s(0, 3) - comm).margin(0.002));
  CHECK(secs(got, profile::Cat::Attention) >= 0.02);
  CHECK(secs(got, profile::Cat::Conditioning) == Approx(s(4, 5)).margin(0.002));
  CHECK(secs(got, profile::Cat::Conditioning) >= 0.03);
  // Only the outer linear: the nested one's 0.02 s went to conditioning.
  CHECK(secs(got, profile::Cat::Linear) == Approx(s(6, 7)).margin(0.002));
  CHECK(secs(got, profile::Cat::Linear) >= 0.01);
  CHECK(std::string(profile::cat_name(profile::Cat::Conditioning)) == "conditioning");
}

TEST_CASE("profile: off, scopes record nothing", "[runtime][profile]") {
  profile::enable(false);
  profile::reset();
  {
    profile::Scope l(profile::Cat::Linear);
    spin(0.005);
  }
  CHECK(secs(profile::totals(), profile::Cat::Linear) == 0.0);
}
