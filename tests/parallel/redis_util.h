// A real redis-server for the rendezvous tests: started on 127.0.0.1:<free port> without
// persistence, killed on destruction.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace dit_test {


inline std::string find_redis_server() {
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

inline int free_port() {
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

inline bool can_connect(int port) {
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
    for (int i = 0; i < 500 && !can_connect(port); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
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


}  // namespace dit_test
