// A rank that stops responding (SIGSTOP here; a swapped-out node or a debugger alike) is
// named within seconds, with the default --timeout of 300 s, and every other rank exits:
// the heartbeats in the rendezvous store tell which one stopped.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <fstream>

#include "parallel/rendezvous.h"
#include "process_util.h"

using namespace dit_test;
using namespace std::chrono_literals;

namespace {

constexpr double kTarget = 15.0;  // seconds from SIGSTOP to the end of every other rank

std::map<std::string, std::string> loop_rank(int rank, int world, const std::string& rdzv, const std::string& ready) {
  return {{"DIT_PT_MODE", "launch"},         {"DIT_PT_WORLD", std::to_string(world)},
          {"DIT_PT_SCENARIO", "loop"},       {"DIT_RANK", std::to_string(rank)},
          {"DIT_WORLD_SIZE", std::to_string(world)}, {"DIT_RENDEZVOUS", rdzv},
          {"DIT_PT_TIMEOUT_MS", "300000"},  // --timeout's default
          {"DIT_PT_READY_DIR", ready}};
}

// The worker processes of a launcher (its children), in pid order.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> kids;
  DIR* d = opendir("/proc");
  while (const dirent* e = d ? readdir(d) : nullptr) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(f, line);
    const auto paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 2));
    char state;
    long ppid;
    rest >> state >> ppid;
    if (ppid == parent) kids.push_back(pid);
  }
  if (d) closedir(d);
  std::sort(kids.begin(), kids.end());
  return kids;
}

std::string environ_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s;
}

}  // namespace

TEST_CASE("external launch: a SIGSTOPped rank is named and the others exit within 15 s", "[parallel][stuck]") {
  const std::string dir = dit::make_private_rendezvous_dir();
  std::vector<Proc> procs;
  ReadyDir ready;
  for (int r = 0; r < 3; r++) procs.push_back(spawn_self(loop_rank(r, 3, "file:" + dir, ready.path)));
  REQUIRE(wait_ready(ready.path, 3));  // connected and looping over all_reduce_sum
  REQUIRE(kill(procs[1].pid, SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r : {0, 2}) {
    Result res = wait_proc(procs[r], std::chrono::seconds(40));
    const double since_stop = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO("rank " << r << " after " << since_stop << " s:\n" << res.output);
    CHECK(res.code == 1);
    CHECK(since_stop < kTarget);
    CHECK_THAT(res.output, Catch::Contains("rank 1 (host ") &&
                               Catch::Contains("pid " + std::to_string(procs[1].pid) + ") has not responded for") &&
                               Catch::Contains("(stopped or swapped out?)"));
    CHECK_THAT(res.output, !Catch::Contains("rank " + std::to_string(2 - r) + " failed"));  // no healthy peer blamed
  }
  kill(procs[1].pid, SIGKILL);
  wait_proc(procs[1], 5s);
  dit::remove_rendezvous_dir(dir);
}

TEST_CASE("launcher: a SIGSTOPped worker is named and the launcher ends within 15 s", "[parallel][stuck]") {
  ReadyDir ready;
  Proc p = spawn_self({{"DIT_PT_MODE", "launch"},
                       {"DIT_PT_WORLD", "3"},
                       {"DIT_PT_SCENARIO", "loop"},
                       {"DIT_PT_TIMEOUT_MS", "300000"},
                       {"DIT_PT_READY_DIR", ready.path}});
  // A forked worker shows the launcher's environment until it execs its own (with DIT_RANK):
  // look until all three are there and rank 2 is among them.
  std::vector<pid_t> kids;
  struct KillIfFailed {  // a failed REQUIRE below must not leave the looping workers behind
    pid_t launcher;
    const std::vector<pid_t>& workers;
    bool armed = true;
    ~KillIfFailed() {
      if (!armed) return;
      for (pid_t k : workers) kill(k, SIGKILL);
      kill(launcher, SIGKILL);
      waitpid(launcher, nullptr, 0);
    }
  } guard{p.pid, kids};
  pid_t victim = -1;
  for (int i = 0; i < 500 && victim < 0; i++) {
    std::this_thread::sleep_for(20ms);
    kids = children_of(p.pid);
    if (kids.size() < 3) continue;
    for (pid_t k : kids)
      if (environ_of(k).find(std::string("DIT_RANK=2") + '\0') != std::string::npos) victim = k;
  }
  REQUIRE(kids.size() == 3);
  REQUIRE(victim > 0);
  REQUIRE(wait_ready(ready.path, 3));  // every worker connected and looping
  REQUIRE(kill(victim, SIGSTOP) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  Result r = wait_proc(p, 40s);
  guard.armed = false;
  const double since_stop = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("after " << since_stop << " s:\n" << r.output);
  CHECK(r.code == 1);
  CHECK(since_stop < kTarget);
  CHECK_THAT(r.output, Catch::Contains("rank 2 (host ") && Catch::Contains("pid " + std::to_string(victim) + ")") &&
                           Catch::Contains("has not responded for"));
  CHECK(kill(victim, 0) != 0);  // the launcher ended the stopped worker too
  kill(victim, SIGKILL);
}
