#include "runtime/process_identity.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>

namespace dit {

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {0};
    return std::string(gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "?");
  }();
  return name;
}

const std::string& process_table_id() {
  static const std::string id = [] {
    std::string s = host_name();
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::string b;
    std::getline(boot, b);
    char ns[128] = {0};
    const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
    s += "|" + b + "|" + (n > 0 ? std::string(ns, size_t(n)) : "?");
    for (char& c : s)
      if (c == ' ') c = '_';
    return s;
  }();
  return id;
}

const std::string& process_table_tag() {
  static const std::string tag = [] {
    uint32_t h = 2166136261u;  // FNV-1a
    for (unsigned char c : process_table_id()) h = (h ^ c) * 16777619u;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", h);
    return std::string(buf);
  }();
  return tag;
}

bool pid_alive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  if (paren != std::string::npos && paren + 2 < line.size()) {
    const char state = line[paren + 2];
    if (state == 'Z' || state == 'X') return false;
  }
  return true;
}

}  // namespace dit
