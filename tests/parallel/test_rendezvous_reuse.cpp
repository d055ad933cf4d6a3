// Rendezvous reuse: the same file: directory or redis run name serves run after run —
// after a clean run, after a failed one, after one whose ranks were killed, and while the
// previous run's ranks are still tearing down. Each run gets its own generation.
#include <catch2/catch.hpp>

#include <algorithm>

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "parallel/rendezvous.h"
#include "process_util.h"
#include "redis_util.h"

using namespace dit_test;
using namespace std::chrono_literals;

namespace {

std::map<std::string, std::string> external_rank(int rank, int world, const std::string& rdzv,
                                                 const std::string& scenario, int timeout_ms = 20000) {
  return {{"DIT_PT_MODE", "launch"},
          {"DIT_PT_WORLD", std::to_string(world)},
          {"DIT_PT_SCENARIO", scenario},
          {"DIT_RANK", std::to_string(rank)},
          {"DIT_WORLD_SIZE", std::to_string(world)},
          {"DIT_RENDEZVOUS", rdzv},
          {"DIT_ADDR", "127.0.0.1"},
          {"DIT_PT_TIMEOUT_MS", std::to_string(timeout_ms)}};
}

// Runs `world` external ranks (rank order of start: `order`, `gap` apart) and returns
// their results.
std::vector<Result> run_external(int world, const std::string& rdzv, const std::string& scenario,
                                 std::vector<int> order = {}, std::chrono::milliseconds gap = 0ms) {
  if (order.empty())
    for (int r = 0; r < world; r++) order.push_back(r);
  std::vector<Proc> procs(world);
  for (int r : order) {
    procs[r] = spawn_self(external_rank(r, world, rdzv, scenario));
    std::this_thread::sleep_for(gap);
  }
  std::vector<Result> res;
  for (auto& p : procs) res.push_back(wait_proc(p, 60s));
  return res;
}

void require_passed(const std::vector<Result>& res) {
  for (size_t r = 0; r < res.size(); r++) {
    INFO("rank " << r << " output:\n" << res[r].output);
    REQUIRE(res[r].code == 0);
  }
  REQUIRE_THAT(res[0].output, Catch::Contains("ok: rank 0 of " + std::to_string(res.size()) + " passed"));
}

Result launch(int world, const std::string& rdzv, const std::string& scenario, int victim = -1) {
  std::map<std::string, std::string> v{{"DIT_PT_MODE", "launch"},  {"DIT_PT_WORLD", std::to_string(world)},
                                        {"DIT_PT_SCENARIO", scenario}, {"DIT_PT_RDZV", rdzv},
                                        {"DIT_ADDR", "127.0.0.1"},     {"DIT_PT_TIMEOUT_MS", "20000"}};
  if (victim >= 0) v["DIT_PT_VICTIM"] = std::to_string(victim);
  return wait_proc(spawn_self(v), 60s);
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> v;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    v.push_back(e.path().lexically_relative(dir).string());
  std::sort(v.begin(), v.end());
  return v;
}

std::string redis_keys(int port, const std::string& pattern) {
  std::string cmd = "redis-cli -p " + std::to_string(port) + " --scan --pattern '" + pattern + "' | sort";
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  return out;
}

}  // namespace

TEST_CASE("file: rendezvous reused run after run (launcher and external ranks)", "[parallel][rendezvous]") {
  const std::string dir = dit::make_private_rendezvous_dir();
  const std::string rdzv = "file:" + dir;
  for (int run = 0; run < 2; run++) {
    INFO("launcher run " << run);
    Result r = launch(2, rdzv, "collectives");
    INFO(r.output);
    REQUIRE(r.code == 0);
  }
  for (int run = 0; run < 2; run++) {
    INFO("external run " << run);
    require_passed(run_external(3, rdzv, "collectives"));
  }
  // After a clean run only the newest generation is left (and the owner record): the
  // older ones were deleted. Four runs make four generations (a fifth was once seen under
  // load: a rank read its peer's new "world" marker half-written and opened another).
  std::set<std::string> tops;
  for (const auto& e : entries(dir)) tops.insert(e.substr(0, e.find('/')));
  INFO("left: " << tops.size() << " entries");
  REQUIRE(tops.size() == 2);
  CHECK(tops.count("owner") == 1);
  const std::string gen = *std::find_if(tops.begin(), tops.end(), [](const std::string& t) { return t != "owner"; });
  CHECK(gen.rfind("gen-", 0) == 0);
  CHECK(std::stoi(gen.substr(4)) == 4);
  dit::remove_rendezvous_dir(dir);
}

TEST_CASE("file: a run after a failed run does not see the old failure", "[parallel][rendezvous]") {
  const std::string dir = dit::make_private_rendezvous_dir();
  const std::string rdzv = "file:" + dir;
  // External ranks where rank 1 fails before connecting: every rank joined, all failed.
  auto failed = run_external(2, rdzv, "badinput");
  CHECK(failed[0].code == 1);
  CHECK_THAT(failed[0].output, Catch::Contains("rank 1 failed: cannot load input"));
  // A rank of a killed run that never left (SIGKILL mid-connect).
  Proc lone = spawn_self(external_rank(0, 2, rdzv, "collectives"));
  std::this_thread::sleep_for(500ms);
  kill(lone.pid, SIGKILL);
  wait_proc(lone, 5s);
  // The next run, rank 1 first: neither the old abort nor the killed rank's claim matter.
  auto res = run_external(2, rdzv, "collectives", {1, 0}, 300ms);
  for (auto& r : res) CHECK_THAT(r.output, !Catch::Contains("cannot load input"));
  require_passed(res);
  dit::remove_rendezvous_dir(dir);
}

TEST_CASE("file: the next run starts while the previous run's ranks are still ending", "[parallel][rendezvous]") {
  const std::string dir = dit::make_private_rendezvous_dir();
  const std::string rdzv = "file:" + dir;
  for (int run = 0; run < 3; run++) {
    // Rank 1 of the next run is started before rank 0 of this one has ended.
    std::vector<Proc> cur, next;
    for (int r = 0; r < 2; r++) cur.push_back(spawn_self(external_rank(r, 2, rdzv, "collectives")));
    for (;;) {  // wait for rank 1 to be done, then start the next run's rank 1 at once
      int st;
      if (waitpid(cur[1].pid, &st, WNOHANG) == cur[1].pid) {
        cur[1].pid = -1;
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    next.push_back(spawn_self(external_rank(1, 2, rdzv, "collectives")));
    Result r0 = wait_proc(cur[0], 60s);
    INFO("run " << run << " rank 0:\n" << r0.output);
    CHECK(r0.code == 0);
    next.insert(next.begin(), spawn_self(external_rank(0, 2, rdzv, "collectives")));
    std::vector<Result> res;
    for (auto& p : next) res.push_back(wait_proc(p, 60s));
    require_passed(res);
  }
  dit::remove_rendezvous_dir(dir);
}

TEST_CASE("redis: a run name reused after a failed run and after clean runs", "[parallel][rendezvous]") {
  std::string bin = find_redis_server();
  if (bin.empty()) {
    WARN("SKIPPED: redis-server is not installed (tools/setup.sh installs it)");
    return;
  }
  RedisServer redis(bin);
  REQUIRE(can_connect(redis.port));
  const std::string url = redis.url("reused");
  // A launcher run where rank 1 cannot load its input.
  Result bad = launch(3, url, "badinput", 1);
  CHECK(bad.code == 1);
  CHECK_THAT(bad.output, Catch::Contains("cannot load input"));
  // External ranks where rank 2 fails first.
  auto failed = run_external(3, url, "badinput", {2, 0, 1}, 100ms);
  // Then clean runs under the same name: launcher, then external ranks in any order.
  for (int run = 0; run < 2; run++) {
    Result r = launch(3, url, "collectives");
    INFO("launcher run " << run << ":\n" << r.output);
    CHECK_THAT(r.output, !Catch::Contains("cannot load input"));
    REQUIRE(r.code == 0);
  }
  auto res = run_external(3, url, "collectives", {2, 1, 0}, 200ms);
  for (auto& r : res) CHECK_THAT(r.output, !Catch::Contains("cannot load input"));
  require_passed(res);
  // A clean end removes the older generations' keys: only the newest one's remain.
  const std::string keys = redis_keys(redis.port, "dit/reused/*");
  INFO("keys left:\n" << keys);
  std::set<std::string> gens;
  std::istringstream is(keys);
  for (std::string k; std::getline(is, k);) gens.insert(k.substr(0, k.find('/', std::strlen("dit/reused/"))));
  CHECK(gens.size() == 2);  // dit/reused/generation and dit/reused/g<newest>
  CHECK(gens.count("dit/reused/generation") == 1);
}
