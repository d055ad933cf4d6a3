// Lent cores (parallel/lent_cores.h): which cores a replica's output rank may use after the
// loop, and that lending widens the affinity and thread count and gives them back.
#include <catch2/catch.hpp>

#include "parallel/lent_cores.h"
#include "parallel/placement.h"
#include "runtime/engine.h"

using namespace dit;

TEST_CASE("lent cores: the union of the CPU sets of the ranks on this machine only", "[parallel][placement]") {
  // Ranks 0 and 1 on host 7 (cores 0-1 and 2-3, 2 threads each), rank 2 on host 9.
  const std::vector<RankCores> all = {{7, {0, 1}, 2}, {7, {2, 3}, 2}, {9, {0, 1}, 2}};
  const LocalCores here = combine_local_cores(all, 7);
  CHECK(here.cpus == std::vector<int>{0, 1, 2, 3});
  CHECK(here.threads == 4);
  CHECK(here.ranks == 2);
  const LocalCores there = combine_local_cores(all, 9);
  CHECK(there.cpus == std::vector<int>{0, 1});
  CHECK(there.threads == 2);
  CHECK(there.ranks == 1);
  // Unpinned ranks (each allowed every core): threads add up, but never beyond the cores.
  const LocalCores unpinned = combine_local_cores({{1, {0, 1}, 2}, {1, {0, 1}, 2}}, 1);
  CHECK(unpinned.cpus == std::vector<int>{0, 1});
  CHECK(unpinned.threads == 2);
}

TEST_CASE("lent cores: each machine's first rank leads it (--vae-parallel machines)", "[parallel][placement]") {
  // Ranks 0, 2 on host 7, ranks 1, 3 on host 9, rank 4 on host 5: leaders 0, 1, 4.
  const std::vector<RankCores> all = {{7, {0}, 1}, {9, {0}, 1}, {7, {1}, 1}, {9, {1}, 1}, {5, {0}, 1}};
  CHECK(machine_leaders(all) == std::vector<int>{0, 1, 4});
  CHECK(machine_leaders({{3, {0}, 1}, {3, {1}, 1}}) == std::vector<int>{0});
}

TEST_CASE("lent cores: widened while alive, restored after", "[parallel][placement]") {
  const std::vector<int> allowed = allowed_cpus();
  if (allowed.size() < 2) {
    WARN("one allowed core: lending cannot widen anything here");
    return;
  }
  const int threads = num_threads();
  pin_to_cpus({allowed[0]});
  set_num_threads(1);
  {
    LocalCores c;
    c.cpus = {allowed[0], allowed[1]};
    c.threads = 2;
    c.ranks = 2;
    LentCores lent(c);
    CHECK(allowed_cpus() == c.cpus);
    CHECK(num_threads() == 2);
  }
  CHECK(allowed_cpus() == std::vector<int>{allowed[0]});
  CHECK(num_threads() == 1);
  {
    LocalCores alone;  // a rank alone on its machine lends nothing
    alone.cpus = allowed;
    alone.threads = int(allowed.size());
    alone.ranks = 1;
    LentCores lent(alone);
    CHECK(allowed_cpus() == std::vector<int>{allowed[0]});
    CHECK(num_threads() == 1);
  }
  pin_to_cpus(allowed);
  set_num_threads(threads);
}
