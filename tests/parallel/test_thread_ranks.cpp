// Collectives with ranks as threads of this process, rendezvous through one in-memory store.
#include <catch2/catch.hpp>

#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "collective_checks.h"
#include "thread_ranks.h"
#include "parallel/mesh.h"
#include "parallel/process_group.h"
#include "runtime/error.h"

using namespace dit;

namespace {

// Runs fn(world group) on `world` threads; fails with the first rank's error.
void run_ranks(int world, const std::function<void(std::shared_ptr<ProcessGroup>)>& fn,
               std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const std::string err =
      dit_test::run_rank_threads(world, timeout, [&](std::shared_ptr<ProcessGroup> pg, int) { fn(pg); });
  if (!err.empty()) FAIL(err);
}

}  // namespace

TEST_CASE("collectives, ranks as threads", "[parallel]") {
  int world = GENERATE(1, 2, 3, 4, 8);
  INFO("world size " << world);
  run_ranks(world, [](std::shared_ptr<ProcessGroup> pg) { dit_test::check_everything(*pg); });
}

TEST_CASE("device mesh groups, ranks as threads", "[parallel]") {
  struct Case {
    MeshDegrees d;
  } cases[] = {{{2, 2, 2, 1}}, {{1, 2, 2, 2}}, {{2, 2, 1, 2}}, {{1, 1, 2, 2}}, {{1, 1, 1, 4}}, {{1, 2, 1, 1}}};
  for (auto& c : cases) {
    INFO(mesh_str(c.d));
    run_ranks(c.d.world(), [&](std::shared_ptr<ProcessGroup> pg) {
      DeviceMesh mesh(pg, c.d);
      dit_test::check_mesh_groups(mesh);
      dit_test::check_all_to_all(mesh.ulysses(), 33);
      dit_test::check_ring_p2p(mesh.ring(), 100, 3);
    });
  }
}

TEST_CASE("p2p buffers are reused, a busy buffer is refused", "[parallel]") {
  run_ranks(2, [](std::shared_ptr<ProcessGroup> pg) {
    std::vector<float> a(64, float(pg->rank())), b(64, -1.f);
    int peer = 1 - pg->rank();
    for (int step = 0; step < 5; step++) {
      auto s = pg->isend(a.data(), a.size() * 4, peer, 7);
      auto r = pg->irecv(b.data(), b.size() * 4, peer, 7);
      if (step == 0) REQUIRE_THROWS_WITH(pg->isend(a.data(), a.size() * 4, peer, 8),
                                         Catch::Contains("still has a pending operation"));
      s.wait();
      r.wait();
      REQUIRE(b[63] == float(peer));
    }
  });
}

TEST_CASE("bad arguments become dit::Error naming the op and group", "[parallel]") {
  run_ranks(2, [](std::shared_ptr<ProcessGroup> pg) {
    std::vector<float> x(4);
    REQUIRE_THROWS_WITH(pg->all_to_all_v(x.data(), {1}, x.data(), {1}),
                        Catch::Contains("all_to_all_v on group 'world'"));
    REQUIRE_THROWS_WITH(pg->broadcast(x.data(), 4, 5), Catch::Contains("root 5"));
    REQUIRE_THROWS_WITH(pg->split("x", {0, 1, 2}), Catch::Contains("rank 2 is not a member"));
    pg->barrier();
  });
}

TEST_CASE("a rank that never arrives: rendezvous times out with a clear error", "[parallel]") {
  auto hash = std::make_shared<MemoryStore>();
  auto store = RendezvousStore::wrap(hash, 2, std::chrono::milliseconds(500));
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(ProcessGroup::create_world(store, 0, 2, dit_test::comm_options(std::chrono::milliseconds(500))),
                      Catch::Contains("timed out") && Catch::Contains("connect on group 'world'"));
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("a rank that posts an abort stops the others waiting in rendezvous", "[parallel]") {
  auto hash = std::make_shared<MemoryStore>();
  auto store0 = RendezvousStore::wrap(hash, 3, std::chrono::seconds(60));
  auto store2 = RendezvousStore::wrap(hash, 3, std::chrono::seconds(60));
  std::thread failer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    store2->post_abort(2, "cannot open model 'nope.safetensors'");
  });
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(ProcessGroup::create_world(store0, 0, 3, dit_test::comm_options(std::chrono::seconds(60))),
                      Catch::Contains("rank 2 failed: cannot open model 'nope.safetensors'"));
  failer.join();
  REQUIRE(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}
