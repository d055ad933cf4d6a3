// Placement: local rank r of L ranks with T threads gets its own T cores of the allowed set.
#include <catch2/catch.hpp>

#include <sched.h>

#include <set>
#include <thread>

#include "parallel/launcher.h"
#include "parallel/placement.h"
#include "runtime/error.h"

using namespace dit;

namespace {
std::vector<int> iota_cpus(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}
}  // namespace

TEST_CASE("placement: 2 ranks x 1 thread on 2 cores get a core each") {
  const auto a = rank_cores(iota_cpus(2), 0, 2, 1), b = rank_cores(iota_cpus(2), 1, 2, 1);
  CHECK(a.cpus == std::vector<int>{0});
  CHECK(b.cpus == std::vector<int>{1});
  CHECK_FALSE(a.oversubscribed);
  CHECK_FALSE(b.oversubscribed);
}

TEST_CASE("placement: 8 ranks x 2 threads on 16 cores are disjoint and cover every core") {
  std::set<int> seen;
  for (int r = 0; r < 8; ++r) {
    const Placement p = rank_cores(iota_cpus(16), r, 8, 2);
    CHECK(p.cpus == std::vector<int>{2 * r, 2 * r + 1});
    CHECK_FALSE(p.oversubscribed);
    for (int c : p.cpus) CHECK(seen.insert(c).second);
  }
  CHECK(seen.size() == 16);
}

TEST_CASE("placement: oversubscription wraps round the allowed cores and says so") {
  // 4 ranks x 1 thread on 2 cores: 0,1,0,1
  for (int r = 0; r < 4; ++r) {
    const Placement p = rank_cores(iota_cpus(2), r, 4, 1);
    CHECK(p.cpus == std::vector<int>{r % 2});
    CHECK(p.oversubscribed);
  }
  // 3 ranks x 2 threads on 4 cores: {0,1} {2,3} {0,1}
  CHECK(rank_cores(iota_cpus(4), 2, 3, 2).cpus == std::vector<int>{0, 1});
  CHECK(rank_cores(iota_cpus(4), 2, 3, 2).oversubscribed);
  // more threads than cores: every core once
  CHECK(rank_cores(iota_cpus(2), 0, 1, 4).cpus == std::vector<int>{0, 1});
}

TEST_CASE("placement: a restricted allowed set is split in its own order") {
  const std::vector<int> allowed = {2, 3, 5, 7};
  CHECK(rank_cores(allowed, 0, 2, 2).cpus == std::vector<int>{2, 3});
  CHECK(rank_cores(allowed, 1, 2, 2).cpus == std::vector<int>{5, 7});
  CHECK(rank_cores(allowed, 3, 4, 1).cpus == std::vector<int>{7});
  CHECK_FALSE(rank_cores(allowed, 3, 4, 1).oversubscribed);
  CHECK(rank_cores(allowed, 2, 3, 2).cpus == std::vector<int>{2, 3});  // wrapped
  CHECK(rank_cores(allowed, 2, 3, 2).oversubscribed);
}

TEST_CASE("placement: bad arguments are errors") {
  CHECK_THROWS_AS(rank_cores({}, 0, 1, 1), Error);
  CHECK_THROWS_AS(rank_cores(iota_cpus(2), 2, 2, 1), Error);
  CHECK_THROWS_AS(rank_cores(iota_cpus(2), -1, 2, 1), Error);
  CHECK_THROWS_AS(rank_cores(iota_cpus(2), 0, 2, 0), Error);
}

TEST_CASE("placement: cpu lists print as ranges") {
  CHECK(cpu_list_string({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  CHECK(cpu_list_string({5}) == "5");
  CHECK(cpu_list_string({}) == "");
}

TEST_CASE("placement: place_rank pins a local rank in a thread, and --no-pin or a lone rank leave it alone") {
  const std::vector<int> allowed = allowed_cpus();
  LaunchEnv env;
  env.external = true;
  env.world = env.local_world = 2;
  env.local_rank = env.rank = 1;
  env.local_known = true;
  // In a thread of its own, so this test process's affinity is untouched.
  Placement pinned, nopin, lone, unknown;
  std::vector<int> after;
  std::thread([&] {
    nopin = place_rank(env, 1, false);
    LaunchEnv guessed = env;  // DIT_RANK without DIT_LOCAL_*: the local rank is a guess
    guessed.local_known = false;
    unknown = place_rank(guessed, 1, true);
    LaunchEnv single;
    lone = place_rank(single, 1, true);
    pinned = place_rank(env, 1, true);
    after = allowed_cpus();
  }).join();
  CHECK_FALSE(nopin.pinned);
  CHECK(nopin.cpus == allowed);
  CHECK_FALSE(lone.pinned);
  CHECK_FALSE(unknown.pinned);
  CHECK_THAT(unknown.note, Catch::Contains("DIT_LOCAL_RANK"));
  if (allowed.size() >= 2) {
    REQUIRE(pinned.pinned);
    CHECK(pinned.cpus == std::vector<int>{allowed[1]});
    CHECK(after == pinned.cpus);
  } else {
    CHECK_FALSE(pinned.pinned);  // one core: already bound
  }
  CHECK(allowed_cpus() == allowed);
}
