// Rendezvous through a real redis-server on 127.0.0.1, started and stopped by the test.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "parallel/launcher.h"
#include "parallel/rendezvous.h"
#include "process_util.h"

using namespace dit_test;
using namespace std::chrono_literals;

namespace {

std::string find_redis_server() {
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  path += ":/usr/sbin:/usr/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t c = path.find(':', start);
    if (c == std::string::npos) c = path.size();
    std::string cand = path.substr(start, c - start) + "/redis-server";
    if (access(cand.c_str(), X_OK) == 0) return cand;
    start = c + 1;
  }
  return "";
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

bool can_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A redis-server on 127.0.0.1:<free port>, no persistence; killed on destruction.
struct RedisServer {
  pid_t pid = -1;
  int port = 0;
  explicit RedisServer(const std::string& bin) {
    port = free_port();
    std::string p = std::to_string(port);
    pid = fork();
    if (pid == 0) {
      int nul = open("/dev/null", O_RDWR);
      dup2(nul, 0);
      dup2(nul, 1);
      dup2(nul, 2);
      execl(bin.c_str(), bin.c_str(), "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--protected-mode", "yes", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 500 && !can_connect(port); i++) std::this_thread::sleep_for(10ms);
  }
  ~RedisServer() {
    if (pid > 0) {
      kill(pid, SIGTERM);
      int st;
      waitpid(pid, &st, 0);
    }
  }
  std::string url(const std::string& run) const { return "redis://127.0.0.1:" + std::to_string(port) + "/" + run; }
};

}  // namespace

TEST_CASE("rendezvous through a real redis-server: launcher, two 'machines', key cleanup", "[parallel]") {
  std::string bin = find_redis_server();
  if (bin.empty()) {
    WARN("SKIPPED: redis-server is not installed (tools/setup.sh installs it); redis rendezvous not tested");
    return;
  }
  RedisServer redis(bin);
  REQUIRE(can_connect(redis.port));

  // One launcher, 3 ranks, redis rendezvous.
  for (int run = 0; run < 2; run++) {  // the same run id twice: the first run's keys must be gone
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
    auto store = dit::RendezvousStore::open(redis.url("same-run"), 3, 2s);
    CHECK_FALSE(store->check({"world/0"}));  // rank 0 deleted the run's keys at the end
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
