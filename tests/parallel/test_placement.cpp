// Placement: local rank r of L ranks with T threads gets its own T cores of the allowed set,
// one CPU per physical core while the cores suffice (SMT siblings from a fake sysfs).
#include <catch2/catch.hpp>

#include <sched.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

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

namespace {
// A fake /sys/devices/system/cpu: cpuN/topology/core_cpus_list for each (cpu, list) given.
struct FakeSysfs {
  std::string root;
  explicit FakeSysfs(const std::vector<std::pair<int, std::string>>& lists, const char* name = "core_cpus_list") {
    char tmpl[] = "/tmp/dit-sysfs-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    root = tmpl;
    for (const auto& [cpu, list] : lists) {
      const std::string dir = root + "/cpu" + std::to_string(cpu) + "/topology";
      std::filesystem::create_directories(dir);
      std::ofstream(dir + "/" + name) << list << "\n";
    }
  }
  ~FakeSysfs() { std::filesystem::remove_all(root); }
};
}  // namespace

TEST_CASE("placement: SMT siblings are one core, and ranks take one CPU per core while the cores suffice") {
  // 4 cores x 2 hyperthreads numbered as Intel servers do: core k is CPUs k and k + 4.
  const FakeSysfs intel({{0, "0,4"}, {1, "1,5"}, {2, "2,6"}, {3, "3,7"}, {4, "0,4"}, {5, "1,5"}, {6, "2,6"}, {7, "3,7"}});
  const std::vector<std::vector<int>> cores = physical_cores(iota_cpus(8), intel.root);
  CHECK(cores == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  // 4 ranks x 1 thread, or 2 x 2: a core each thread.
  CHECK(placement_order(cores, 4) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(rank_cores(placement_order(cores, 4), 1, 2, 2).cpus == std::vector<int>{2, 3});
  // 2 ranks x 4 threads: more threads than cores, so each rank gets whole cores, both siblings.
  const std::vector<int> whole = placement_order(cores, 8);
  CHECK(whole == std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7});
  CHECK(rank_cores(whole, 0, 2, 4).cpus == std::vector<int>{0, 1, 4, 5});
  CHECK(rank_cores(whole, 1, 2, 4).cpus == std::vector<int>{2, 3, 6, 7});

  // Siblings numbered next to each other (core k is CPUs 2k and 2k + 1), the older file name,
  // and ranges: 2 ranks x 2 threads land on four different cores, not on two.
  const FakeSysfs adjacent({{0, "0-1"}, {1, "0-1"}, {2, "2-3"}, {3, "2-3"}, {4, "4-5"}, {5, "4-5"}, {6, "6-7"}, {7, "6-7"}},
                           "thread_siblings_list");
  const std::vector<std::vector<int>> adj = physical_cores(iota_cpus(8), adjacent.root);
  CHECK(adj == std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(rank_cores(placement_order(adj, 4), 0, 2, 2).cpus == std::vector<int>{0, 2});
  CHECK(rank_cores(placement_order(adj, 4), 1, 2, 2).cpus == std::vector<int>{4, 6});
  // Before, the ascending order gave rank 0 CPUs 0 and 1: both hyperthreads of one core.
  CHECK(rank_cores(iota_cpus(8), 0, 2, 2).cpus == std::vector<int>{0, 1});

  // An allowed subset keeps only its own CPUs of each core.
  CHECK(physical_cores({1, 4, 5, 6}, intel.root) == std::vector<std::vector<int>>{{1, 5}, {4}, {6}});
}

TEST_CASE("placement: without readable topology every CPU is its own core, in ascending order") {
  const FakeSysfs broken({{0, "garbage"}, {1, "5-2"}, {2, "7"}});  // 2's list does not hold 2
  CHECK(physical_cores({3, 2, 1, 0}, broken.root) == std::vector<std::vector<int>>{{0}, {1}, {2}, {3}});
  CHECK(physical_cores(iota_cpus(3), "/nonexistent") == std::vector<std::vector<int>>{{0}, {1}, {2}});
  CHECK(placement_order(physical_cores(iota_cpus(3), "/nonexistent"), 2) == iota_cpus(3));
  CHECK(placement_order(physical_cores(iota_cpus(3), "/nonexistent"), 6) == iota_cpus(3));
}
