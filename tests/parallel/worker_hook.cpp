// Worker mode of the test binary. When DIT_PT_MODE is set, test_parallel does not run
// Catch2 at all: a static initializer takes over and behaves like dit-gen's main does
// (maybe_launch, then connect and run a scenario), so process tests exercise the real
// launcher and real worker processes without a second helper executable.
//
//   DIT_PT_MODE=launch      be dit-gen: launch if needed, else be a rank
//   DIT_PT_WORLD=N          requested world size (LaunchOptions::world_size)
//   DIT_PT_GRACE_MS         launcher grace period after a failure
//   DIT_PT_TIMEOUT_MS       communication timeout of the ranks
//   DIT_PT_RDZV=SPEC        --rendezvous (e.g. redis://127.0.0.1:PORT/run)
//   DIT_PT_NNODES, DIT_PT_NODE_RANK   --nnodes, --node-rank
//   DIT_PT_SCENARIO=collectives|kill|badinput|loop|hang
//   DIT_PT_VICTIM=r         the rank that dies (kill) or cannot load its input (badinput)
//   DIT_PT_OP=all_reduce|all_to_all|p2p|window   what kill/loop repeat (all through shared memory on
//                           one machine unless DIT_PT_TRANSPORT=tcp; all_reduce there is the
//                           strided reduce-scatter in place plus an all-gather)
//   DIT_PT_TRANSPORT=tcp    CommOptions::shared_memory = false
//   DIT_PT_EXPECT_SHM / DIT_PT_EXPECT_TCP   collectives: the world must (not) be on shared memory
//   DIT_PT_MESH=dp,cfg,ring,ulysses   also build and check a device mesh (collectives)
//   DIT_PT_READY_DIR=dir    kill/loop: create dir/ready.<rank> after the first round,
//                           hang: after the barrier (process_util.h's wait_ready)
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "collective_checks.h"
#include "parallel/launcher.h"
#include "parallel/mesh.h"
#include "runtime/error.h"

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::atoi(v) : fallback;
}

// DIT_PT_READY_DIR/ready.<rank>: this rank is connected and where the test wants it.
void mark_ready(int rank) {
  if (const char* dir = std::getenv("DIT_PT_READY_DIR"))
    if (FILE* f = std::fopen((std::string(dir) + "/ready." + std::to_string(rank)).c_str(), "w")) std::fclose(f);
}

int run_rank(const dit::LaunchEnv& env) {
  std::string scenario = std::getenv("DIT_PT_SCENARIO") ? std::getenv("DIT_PT_SCENARIO") : "collectives";
  int victim = env_int("DIT_PT_VICTIM", 1);
  dit::CommOptions co;
  co.timeout = std::chrono::milliseconds(env_int("DIT_PT_TIMEOUT_MS", 30000));
  const char* transport = std::getenv("DIT_PT_TRANSPORT");
  co.shared_memory = !(transport && std::string(transport) == "tcp");
  const std::string op = std::getenv("DIT_PT_OP") ? std::getenv("DIT_PT_OP") : "all_reduce";
  std::shared_ptr<dit::ProcessGroup> world;
  try {
    if (scenario == "badinput" && env.rank == victim)
      throw dit::Error("cannot load input '/nonexistent/prompts.txt': No such file or directory");
    world = dit::connect_world(env, co);
    if (scenario == "collectives") {
      if (std::getenv("DIT_PT_EXPECT_SHM") && !world->uses_shared_memory())
        throw dit::Error("expected shared memory: " + world->shared_memory_note());
      if (std::getenv("DIT_PT_EXPECT_TCP")) {
        if (world->uses_shared_memory()) throw dit::Error("expected TCP, got shared memory");
        std::printf("rank %d on TCP: %s\n", env.rank, world->shared_memory_note().c_str());
      }
      dit_test::check_everything(*world);
      if (const char* m = std::getenv("DIT_PT_MESH")) {
        dit::MeshDegrees d;
        if (std::sscanf(m, "%d,%d,%d,%d", &d.degree[0], &d.degree[1], &d.degree[2], &d.degree[3]) != 4) throw dit::Error("bad DIT_PT_MESH");
        dit::DeviceMesh mesh(world, d);
        dit_test::check_mesh_groups(mesh);
        dit_test::check_all_to_all(mesh.ulysses(), 100);
        dit_test::check_ring_p2p(mesh.ring(), 100, 3);
      }
    } else if (scenario == "kill" || scenario == "badinput" || scenario == "loop") {
      std::vector<float> x(1 << 16, 1.f), y(x.size() * size_t(world->size()), 0.f);
      const int next = (world->rank() + 1) % world->size(), prev = (world->rank() + world->size() - 1) % world->size();
      if (op == "window" && !world->ensure_window(x.size() * 4)) throw dit::Error("no window: " + world->window_note());
      for (int step = 0;; step++) {
        if (scenario == "kill" && env.rank == victim && step == 20) raise(SIGKILL);
        if (op == "window") {
          std::copy(x.begin(), x.end(), world->window_begin());
          world->window_publish();
          for (int j = 0; j < world->size(); ++j) y[0] += world->window_peer(j)[0];
          world->window_release();
        } else if (op == "all_to_all") {
          world->all_to_all(y.data(), y.data() + y.size() / 2, y.size() / 2 / size_t(world->size()));
        } else if (op == "p2p") {
          auto r = world->irecv(y.data(), x.size() * 4, prev, uint32_t(step));
          auto s = world->isend(x.data(), x.size() * 4, next, uint32_t(step));
          s.wait();
          r.wait();
        } else {
          world->all_reduce_sum(x.data(), x.size());
          std::fill(x.begin(), x.end(), 1.f);
        }
        if (step == 0) mark_ready(env.rank);
      }
    } else if (scenario == "hang") {
      world->barrier();
      mark_ready(env.rank);
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    world->shutdown();
    if (env.rank == 0) std::printf("ok: rank 0 of %d passed\n", env.world);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    dit::fail_rank(world.get(), env, e.what());
    return 1;
  }
}

int worker_main() {
  // argv of this process, for the launcher to re-execute.
  std::vector<std::string> args;
  {
    FILE* f = std::fopen("/proc/self/cmdline", "rb");
    std::string cur;
    int c;
    while (f && (c = std::fgetc(f)) != EOF) {
      if (c == 0) {
        args.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(char(c));
      }
    }
    if (f) std::fclose(f);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  try {
    dit::LaunchOptions lo;
    lo.world_size = env_int("DIT_PT_WORLD", 1);
    lo.grace = std::chrono::milliseconds(env_int("DIT_PT_GRACE_MS", 3000));
    lo.program = "test-launcher";
    if (const char* r = std::getenv("DIT_PT_RDZV")) lo.rendezvous = r;
    lo.nnodes = env_int("DIT_PT_NNODES", 1);
    lo.node_rank = env_int("DIT_PT_NODE_RANK", 0);
    if (auto rc = dit::maybe_launch(int(args.size()), argv.data(), lo)) return *rc;
    return run_rank(dit::detect_launch_env(lo));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

const int g_hook = [] {
  const char* mode = std::getenv("DIT_PT_MODE");
  if (mode && std::string(mode) == "launch") {
    std::fflush(stdout);
    int rc = worker_main();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(rc);
  }
  return 0;
}();

}  // namespace
