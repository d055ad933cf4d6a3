// Rendezvous through a real redis-server on 127.0.0.1, started and stopped by the test.
#include <catch2/catch.hpp>

#include "parallel/launcher.h"
#include "parallel/rendezvous.h"
#include "process_util.h"
#include "redis_util.h"

using namespace dit_test;
using namespace std::chrono_literals;

TEST_CASE("rendezvous through a real redis-server: launcher, two 'machines', key cleanup", "[parallel]") {
  std::string bin = find_redis_server();
  if (bin.empty()) {
    WARN("SKIPPED: redis-server is not installed (tools/setup.sh installs it); redis rendezvous not tested");
    return;
  }
  RedisServer redis(bin);
  REQUIRE(can_connect(redis.port));

  // One launcher, 3 ranks, redis rendezvous.
  for (int run = 0; run < 2; run++) {  // the same run id twice: a generation each
    INFO("run " << run);
    Result r = wait_proc(spawn_self({{"DIT_PT_MODE", "launch"},
                                     {"DIT_PT_WORLD", "3"},
                                     {"DIT_PT_SCENARIO", "collectives"},
                                     {"DIT_ADDR", "127.0.0.1"},
                                     {"DIT_PT_RDZV", redis.url("same-run")}}),
                         60s);
    INFO(r.output);
    REQUIRE(r.code == 0);
    REQUIRE_THAT(r.output, Catch::Contains("ok: rank 0 of 3 passed"));
    REQUIRE_THAT(r.output, Catch::Contains("(rendezvous " + redis.url("same-run") + ")"));
  }
  {
    // Each run had its own generation; the second one's clean end deleted the first's keys.
    CHECK(dit::RendezvousStore::open(redis.url("same-run"), 3, 2s)->generation() == 2);
    CHECK(dit::RendezvousStore::attach(redis.url("same-run"), 3, 2, 2s)->check({"world/0"}));
    CHECK_FALSE(dit::RendezvousStore::attach(redis.url("same-run"), 3, 1, 2s)->check({"world/0"}));
  }

  // Two launchers as two machines would run them: --nnodes 2 --node-rank k --nproc-per-node 2.
  std::vector<Proc> nodes;
  for (int node = 0; node < 2; node++)
    nodes.push_back(spawn_self({{"DIT_PT_MODE", "launch"},
                                {"DIT_PT_WORLD", "4"},
                                {"DIT_PT_NNODES", "2"},
                                {"DIT_PT_NODE_RANK", std::to_string(node)},
                                {"DIT_PT_SCENARIO", "collectives"},
                                {"DIT_PT_MESH", "1,2,1,2"},
                                {"DIT_ADDR", "127.0.0.1"},
                                {"DIT_PT_RDZV", redis.url("two-nodes")}}));
  Result n0 = wait_proc(nodes[0], 60s), n1 = wait_proc(nodes[1], 60s);
  INFO("node 0:\n" << n0.output << "\nnode 1:\n" << n1.output);
  CHECK(n0.code == 0);
  CHECK(n1.code == 0);
  CHECK_THAT(n0.output, Catch::Contains("starting ranks 0..1 of 4"));
  CHECK_THAT(n1.output, Catch::Contains("starting ranks 2..3 of 4"));
  CHECK_THAT(n0.output, Catch::Contains("ok: rank 0 of 4 passed"));
}

TEST_CASE("redis rendezvous: a server that is not there is a clear error", "[parallel]") {
  int port = free_port();
  REQUIRE_THROWS_WITH(dit::RendezvousStore::open("redis://127.0.0.1:" + std::to_string(port), 2, 2s),
                      Catch::Contains("cannot open the store"));
}
