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
  On on;
  {
    profile::Scope a(profile::Cat::Attention);
    spin(0.02);
    {
      profile::Scope c(profile::Cat::Communication);
      spin(0.03);
    }
  }
  {
    profile::Scope c(profile::Cat::Conditioning);
    spin(0.01);
    {
      profile::Scope l(profile::Cat::Linear);  // e.g. the adaLN linear: conditioning, not linear
      spin(0.02);
    }
  }
  {
    profile::Scope l(profile::Cat::Linear);
    spin(0.01);
  }
  const profile::Totals t = profile::totals();
  CHECK(secs(t, profile::Cat::Attention) == Approx(0.02).margin(0.005));
  CHECK(secs(t, profile::Cat::Communication) == Approx(0.03).margin(0.005));
  CHECK(secs(t, profile::Cat::Conditioning) == Approx(0.03).margin(0.005));
  CHECK(secs(t, profile::Cat::Linear) == Approx(0.01).margin(0.005));
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
