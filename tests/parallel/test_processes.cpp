// Ranks as processes: the launcher, FileStore rendezvous, external launch, and failures.
// The processes are this test binary in worker mode (worker_hook.cpp).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include "parallel/launcher.h"
#include "parallel/rendezvous.h"
#include "process_util.h"

using namespace dit_test;
using namespace std::chrono_literals;

namespace {

std::map<std::string, std::string> launch_vars(int world, const std::string& scenario) {
  return {{"DIT_PT_MODE", "launch"}, {"DIT_PT_WORLD", std::to_string(world)}, {"DIT_PT_SCENARIO", scenario}};
}

// True once no process of the group is left; a worker still being reaped gets up to 5 s.
bool process_group_gone(pid_t pgid) {
  for (const auto until = std::chrono::steady_clock::now() + 5s;; std::this_thread::sleep_for(20ms)) {
    if (kill(-pgid, 0) != 0 && errno == ESRCH) return true;
    if (std::chrono::steady_clock::now() > until) return false;
  }
}

}  // namespace

TEST_CASE("collectives, ranks as processes started by the launcher (FileStore)", "[parallel]") {
  struct Case {
    int world;
    const char* mesh;
  } c = GENERATE(Case{1, nullptr}, Case{2, "1,2,1,1"}, Case{3, "1,1,3,1"}, Case{4, "1,2,1,2"}, Case{8, "1,2,2,2"});
  INFO("world " << c.world);
  auto vars = launch_vars(c.world, "collectives");
  if (c.mesh) vars["DIT_PT_MESH"] = c.mesh;
  Result r = wait_proc(spawn_self(vars), 120s);
  INFO(r.output);
  REQUIRE(r.code == 0);
  REQUIRE_THAT(r.output, Catch::Contains("ok: rank 0 of " + std::to_string(c.world) + " passed"));
  if (c.world > 1) REQUIRE_THAT(r.output, Catch::Contains("test-launcher: starting ranks 0.." + std::to_string(c.world - 1)));
}

TEST_CASE("external launch: a rank SIGKILLed mid-collective makes the others fail fast", "[parallel]") {
  // No launcher: ranks started directly with DIT_RANK/DIT_WORLD_SIZE/DIT_RENDEZVOUS, as
  // mpirun or a script would; only Gloo's errors can stop the survivors.
  const int world = 3, timeout_ms = 3000;
  std::string dir = dit::make_private_rendezvous_dir();
  ReadyDir ready;
  std::vector<Proc> procs;
  for (int r = 0; r < world; r++) {
    auto vars = launch_vars(world, "loop");
    vars["DIT_RANK"] = std::to_string(r);
    vars["DIT_WORLD_SIZE"] = std::to_string(world);
    vars["DIT_RENDEZVOUS"] = "file:" + dir;
    vars["DIT_PT_TIMEOUT_MS"] = std::to_string(timeout_ms);
    vars["DIT_PT_READY_DIR"] = ready.path;
    procs.push_back(spawn_self(vars));
  }
  REQUIRE(wait_ready(ready.path, world));  // connected and looping over all_reduce_sum
  REQUIRE(kill(procs[1].pid, SIGKILL) == 0);
  auto t0 = std::chrono::steady_clock::now();
  for (int r : {0, 2}) {
    Result res = wait_proc(procs[r], std::chrono::milliseconds(2 * timeout_ms));
    double since_kill = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO("rank " << r << " output:\n" << res.output);
    CHECK(res.code == 1);
    CHECK(since_kill < 2.0 * timeout_ms / 1000);
    CHECK_THAT(res.output, Catch::Contains("all_reduce_sum on group 'world' (rank " + std::to_string(r) + " of 3)"));
    CHECK_THAT(res.output, Catch::Contains("rank 1 is no longer running"));
  }
  Result dead = wait_proc(procs[1], 1s);
  CHECK(dead.code == 128 + SIGKILL);
  dit::remove_rendezvous_dir(dir);
}

TEST_CASE("external launch: a rank that fails during set-up stops the others waiting in rendezvous",
          "[parallel]") {
  const int world = 3;
  std::string dir = dit::make_private_rendezvous_dir();
  std::vector<Proc> procs;
  for (int r = 0; r < world; r++) {
    auto vars = launch_vars(world, "badinput");
    vars["DIT_RANK"] = std::to_string(r);
    vars["DIT_WORLD_SIZE"] = std::to_string(world);
    vars["DIT_RENDEZVOUS"] = "file:" + dir;
    vars["DIT_PT_VICTIM"] = "2";
    vars["DIT_PT_TIMEOUT_MS"] = "60000";  // the abort key must stop them, not the timeout
    procs.push_back(spawn_self(vars));
  }
  for (int r = 0; r < world; r++) {
    Result res = wait_proc(procs[r], 20s);
    INFO("rank " << r << " output:\n" << res.output);
    CHECK(res.code == 1);
    CHECK(res.seconds < 15);
    CHECK_THAT(res.output, Catch::Contains("cannot load input '/nonexistent/prompts.txt'"));
    if (r != 2) CHECK_THAT(res.output, Catch::Contains("rank 2 failed"));
  }
  dit::remove_rendezvous_dir(dir);
}

TEST_CASE("launcher: a worker SIGKILLed mid-collective - survivors fail on their own within 2x timeout",
          "[parallel]") {
  const int timeout_ms = 3000;
  auto vars = launch_vars(4, "kill");
  vars["DIT_PT_VICTIM"] = "1";
  vars["DIT_PT_TIMEOUT_MS"] = std::to_string(timeout_ms);
  vars["DIT_PT_GRACE_MS"] = "60000";  // the launcher does not help: Gloo errors must end them
  Proc p = spawn_self(vars);
  Result r = wait_proc(p, 30s);
  INFO(r.output);
  CHECK(r.code == 128 + SIGKILL);
  CHECK(r.seconds < 2.0 * timeout_ms / 1000 + 2.0);  // + process start-up and rendezvous
  // The survivors name rank 1: from its pid (gone), or from the abort its launcher posted.
  CHECK_THAT(r.output, Catch::Contains("[rank 2] error: all_reduce_sum on group 'world' (rank 2 of 4): rank 1 ") &&
                           (Catch::Contains("rank 1 is no longer running") ||
                            Catch::Contains("rank 1 failed: killed by signal 9")));
  CHECK_THAT(r.output, Catch::Contains("[rank 3] error: all_reduce_sum"));
  CHECK_THAT(r.output, Catch::Contains("test-launcher: failed: rank 1 was killed by signal 9"));
  CHECK(process_group_gone(p.pid));
}

TEST_CASE("two machines: a rank SIGKILLed on one is named by the ranks on the other", "[parallel]") {
  // Node 1 runs in its own pid namespace (unshare), so node 0's ranks cannot check its pids,
  // as on a real second machine: only the abort that node 1's launcher posts for its killed
  // worker can tell them who failed.
  const char* unshare = "/usr/bin/unshare";
  if (access(unshare, X_OK) != 0 || std::system("/usr/bin/unshare --pid --fork true 2>/dev/null") != 0) {
    WARN("skipped: cannot create a pid namespace here (unshare --pid needs root)");
    return;
  }
  const int timeout_ms = 5000;
  const std::string dir = dit::make_private_rendezvous_dir();
  std::vector<Proc> nodes;
  for (int node = 0; node < 2; node++) {
    auto vars = launch_vars(4, "kill");
    vars["DIT_PT_NNODES"] = "2";
    vars["DIT_PT_NODE_RANK"] = std::to_string(node);
    vars["DIT_PT_RDZV"] = "file:" + dir;
    vars["DIT_PT_VICTIM"] = "3";
    vars["DIT_PT_TIMEOUT_MS"] = std::to_string(timeout_ms);
    vars["DIT_PT_GRACE_MS"] = "60000";
    vars["DIT_ADDR"] = "127.0.0.1";
    nodes.push_back(spawn_self(vars, {}, node == 1 ? std::vector<std::string>{unshare, "--pid", "--fork"}
                                                   : std::vector<std::string>{}));
  }
  Result n0 = wait_proc(nodes[0], 30s), n1 = wait_proc(nodes[1], 30s);
  INFO("node 0:\n" << n0.output << "\nnode 1:\n" << n1.output);
  CHECK(n0.code == 1);
  CHECK(n0.seconds < 2.0 * timeout_ms / 1000 + 2.0);
  CHECK_THAT(n0.output, Catch::Contains("[rank 1] error: all_reduce_sum on group 'world' (rank 1 of 4): rank 3 failed: "
                                        "killed by signal 9"));
  CHECK_THAT(n0.output, Catch::Contains("(seen by its launcher)"));
  CHECK(n1.code == 128 + SIGKILL);
  CHECK_THAT(n1.output, Catch::Contains("test-launcher: failed: rank 3 was killed by signal 9"));
  dit::remove_rendezvous_dir(dir);
}

TEST_CASE("launcher: a rank that cannot load its input stops the run with its message", "[parallel]") {
  auto vars = launch_vars(3, "badinput");
  vars["DIT_PT_VICTIM"] = "2";
  vars["DIT_PT_TIMEOUT_MS"] = "60000";
  Proc p = spawn_self(vars);
  Result r = wait_proc(p, 30s);
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(r.seconds < 10);
  CHECK_THAT(r.output, Catch::Contains("[rank 2] error: cannot load input '/nonexistent/prompts.txt'"));
  CHECK_THAT(r.output, Catch::Contains("test-launcher: failed: rank 2 exited with code 1: error: cannot load input"));
  CHECK(process_group_gone(p.pid));
}

TEST_CASE("launcher: Ctrl-C stops every worker and exits 130", "[parallel]") {
  ReadyDir ready;
  auto vars = launch_vars(3, "hang");
  vars["DIT_PT_READY_DIR"] = ready.path;
  Proc p = spawn_self(vars);
  REQUIRE(wait_ready(ready.path, 3));  // every rank connected: the launcher is waiting on them
  REQUIRE(kill(p.pid, SIGINT) == 0);  // what the terminal does (to the launcher at least)
  Result r = wait_proc(p, 15s);
  INFO(r.output);
  CHECK(r.code == 130);
  CHECK(r.seconds < 5);
  CHECK_THAT(r.output, Catch::Contains("test-launcher: interrupted, stopping all ranks"));
  CHECK(process_group_gone(p.pid));
}

TEST_CASE("launch environment: DIT_*, mpirun and srun variables - threads per rank", "[parallel]") {
  auto clear = [] {
    for (const char* v : {"DIT_RANK", "DIT_WORLD_SIZE", "DIT_RENDEZVOUS", "DIT_LOCAL_RANK", "DIT_LOCAL_WORLD_SIZE",
                          "DIT_THREADS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID",
                          "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_STEP_ID",
                          "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID"})
      unsetenv(v);
  };
  clear();
  dit::LaunchEnv e = dit::detect_launch_env();
  CHECK_FALSE(e.external);
  CHECK(e.world == 1);

  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  REQUIRE_THROWS_WITH(dit::detect_launch_env(), Catch::Contains("no rendezvous"));
  dit::LaunchOptions lo;
  lo.rendezvous = "redis://10.0.0.1:6379/r1";
  e = dit::detect_launch_env(lo);
  CHECK(e.external);
  CHECK(e.rank == 3);
  CHECK(e.world == 4);
  CHECK(e.source == "OMPI_COMM_WORLD_RANK");
  CHECK(e.rendezvous == "redis://10.0.0.1:6379/r1");
  clear();

  setenv("SLURM_PROCID", "5", 1);  // in an sbatch script, not under srun: not a rank
  CHECK_FALSE(dit::detect_launch_env().external);
  setenv("SLURM_STEP_NUM_TASKS", "8", 1);
  setenv("DIT_RENDEZVOUS", "file:/shared/rdzv", 1);
  e = dit::detect_launch_env();
  CHECK(e.rank == 5);
  CHECK(e.world == 8);
  CHECK(e.rendezvous == "file:/shared/rdzv");
  CHECK(e.local_world == 8);  // no per-node counts: all on this node
  // srun over several nodes: per-node task counts in SLURM's compressed form.
  setenv("SLURM_STEP_TASKS_PER_NODE", "3(x2),2", 1);
  setenv("SLURM_NODEID", "1", 1);
  CHECK(dit::detect_launch_env().local_world == 3);
  setenv("SLURM_NODEID", "2", 1);
  CHECK(dit::detect_launch_env().local_world == 2);
  setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2)", 1);
  setenv("SLURM_NODEID", "0", 1);
  CHECK(dit::detect_launch_env().local_world == 4);
  setenv("SLURM_STEP_TASKS_PER_NODE", "garbage(", 1);
  CHECK(dit::detect_launch_env().local_world == 8);
  clear();
  // SLURM_NTASKS counts only inside an srun step (an sbatch script has it too).
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("DIT_RENDEZVOUS", "file:/shared/rdzv", 1);
  CHECK_FALSE(dit::detect_launch_env().external);
  setenv("SLURM_STEP_ID", "0", 1);
  e = dit::detect_launch_env();
  CHECK(e.external);
  CHECK(e.world == 2);
  CHECK(e.rank == 1);
  clear();

  setenv("DIT_RANK", "1", 1);
  setenv("DIT_WORLD_SIZE", "2", 1);
  setenv("DIT_RENDEZVOUS", "file:/tmp/x", 1);
  setenv("DIT_THREADS", "3", 1);
  e = dit::detect_launch_env();
  CHECK(e.source == "DIT_RANK");
  CHECK(e.threads == 3);
  char arg0[] = "x";
  char* argv[] = {arg0, nullptr};
  dit::LaunchOptions four;
  four.world_size = 4;
  CHECK_FALSE(dit::maybe_launch(1, argv, four).has_value());  // we are a worker
  clear();

  dit::LaunchOptions bad;
  bad.world_size = 4;
  bad.nnodes = 3;
  REQUIRE_THROWS_WITH(dit::maybe_launch(1, argv, bad),
                      Catch::Contains("--nnodes 3: the parallel degrees make 4 ranks, which do not split evenly"));
  bad.nproc_per_node = 1;
  REQUIRE_THROWS_WITH(dit::maybe_launch(1, argv, bad), Catch::Contains("but the parallel degrees need 4"));
  bad.nproc_per_node = 0;
  bad.nnodes = 2;
  REQUIRE_THROWS_WITH(dit::maybe_launch(1, argv, bad), Catch::Contains("needs --rendezvous redis://"));
  // One process needs no rendezvous, but a malformed one is still refused, not ignored.
  dit::LaunchOptions single;
  single.rendezvous = "bogus";
  REQUIRE_THROWS_WITH(dit::maybe_launch(1, argv, single), Catch::Contains("rendezvous 'bogus': expected file:DIR"));
  single.rendezvous = "file:/tmp/x";
  CHECK_FALSE(dit::maybe_launch(1, argv, single).has_value());

  CHECK(dit::threads_per_rank(5, 4) == 5);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  CHECK(dit::threads_per_rank(0, 1) >= 1);
  CHECK(dit::threads_per_rank(0, 1) <= cores);
  CHECK(dit::threads_per_rank(0, 64) == 1);

  CHECK(dit::parse_rendezvous("redis://h:7000/abc").port == 7000);
  CHECK(dit::parse_rendezvous("redis://h:7000/abc").run == "abc");
  CHECK(dit::parse_rendezvous("file:/tmp/d").dir == "/tmp/d");
  REQUIRE_THROWS_WITH(dit::parse_rendezvous("tcp://h:1"), Catch::Contains("expected file:DIR or redis://"));
  REQUIRE_THROWS_WITH(dit::parse_rendezvous("redis://h:port"), Catch::Contains("bad port"));
}

TEST_CASE("private rendezvous directory is mode 0700 and removed afterwards", "[parallel]") {
  std::string dir = dit::make_private_rendezvous_dir();
  struct stat st;
  REQUIRE(stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  { std::ofstream(dir + "/k") << "v"; }
  dit::remove_rendezvous_dir(dir);
  CHECK(stat(dir.c_str(), &st) != 0);
}
