// Starting this test binary again as a worker or launcher (see worker_hook.cpp) and
// collecting its exit status and output.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace dit_test {

struct Proc {
  pid_t pid = -1;
  std::string out_path;
};

struct Result {
  int code = -1;      // exit code, 128+signal, or -1 if it did not end in time (then killed)
  double seconds = 0;  // from wait start
  std::string output;  // stdout + stderr
};

inline std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// Starts this binary with the current environment minus DIT_* plus `vars`; output to a file.
// `prefix` runs it under another program (e.g. {"/usr/bin/unshare", "--pid", "--fork"}).
inline Proc spawn_self(const std::map<std::string, std::string>& vars, const std::vector<std::string>& extra_args = {},
                       const std::vector<std::string>& prefix = {}) {
  static int counter = 0;
  Proc p;
  char tmpl[] = "/tmp/dit-test-out-XXXXXX";
  int fd = mkstemp(tmpl);
  p.out_path = tmpl;
  std::vector<std::string> env;
  for (char** e = environ; *e; e++)
    if (std::strncmp(*e, "DIT_", 4) != 0 && std::strncmp(*e, "OMPI_", 5) != 0 && std::strncmp(*e, "SLURM_", 6) != 0)
      env.push_back(*e);
  for (auto& kv : vars) env.push_back(kv.first + "=" + kv.second);
  std::vector<char*> cenv;
  for (auto& s : env) cenv.push_back(s.data());
  cenv.push_back(nullptr);
  std::string exe = self_exe();
  std::vector<std::string> args(prefix);
  args.push_back(exe);
  args.push_back("worker-" + std::to_string(counter++));
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  const std::string program = prefix.empty() ? exe : prefix[0];
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);  // own process group: signals from the test reach only this tree
    dup2(fd, 1);
    dup2(fd, 2);
    int nul = open("/dev/null", O_RDONLY);
    dup2(nul, 0);
    execve(program.c_str(), cargv.data(), cenv.data());
    _exit(127);
  }
  close(fd);
  p.pid = pid;
  return p;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Waits up to `limit`; kills the process group if it runs longer.
inline Result wait_proc(const Proc& p, std::chrono::milliseconds limit) {
  Result r;
  auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    pid_t w = waitpid(p.pid, &status, WNOHANG);
    if (w == p.pid) {
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() - t0 > limit) {
      kill(-p.pid, SIGKILL);
      waitpid(p.pid, &status, 0);
      r.code = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.output = read_file(p.out_path);
  unlink(p.out_path.c_str());
  return r;
}

// Looping ranks (scenario kill or loop with DIT_PT_READY_DIR=dir) each create dir/ready.<rank>
// after their first round: waits until all `world` of them are there (true), or `limit`
// passed (false). Tests that stop or kill a rank mid-collective wait for this instead of
// sleeping a fixed time, which a loaded machine (the sanitizer build under ctest -j) outlasts.
struct ReadyDir {
  std::string path;
  ReadyDir() {
    char tmpl[] = "/tmp/dit-test-ready-XXXXXX";
    if (mkdtemp(tmpl)) path = tmpl;
  }
  ~ReadyDir() {
    for (int r = 0; r < 64; ++r) unlink((path + "/ready." + std::to_string(r)).c_str());
    rmdir(path.c_str());
  }
};
inline bool wait_ready(const std::string& dir, int world, std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int n = 0;
    for (int r = 0; r < world; ++r) n += access((dir + "/ready." + std::to_string(r)).c_str(), F_OK) == 0;
    if (n == world) return true;
    if (std::chrono::steady_clock::now() - t0 > limit) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace dit_test
