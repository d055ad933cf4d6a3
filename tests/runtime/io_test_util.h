// Helpers for the [io] tests: a self-deleting temporary directory and raw file writing.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace dit_test {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dit-io-test-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Number of entries in the directory (to check that no temporary files are left).
  size_t count() const {
    size_t n = 0;
    for (auto it = std::filesystem::directory_iterator(path_); it != std::filesystem::directory_iterator(); ++it) ++n;
    return n;
  }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Lines of /proc/self/maps that map a file of directory `dir` (a file mapped twice shows twice).
inline size_t mappings_of(const std::string& dir) {
  const std::string maps = read_bytes("/proc/self/maps");
  size_t n = 0;
  for (size_t at = maps.find(dir + "/"); at != std::string::npos; at = maps.find(dir + "/", at + 1)) ++n;
  return n;
}

}  // namespace dit_test

#include <functional>

#include "runtime/error.h"

namespace dit_test {

// Runs f and returns the dit::Error message it throws ("<no error>" if it does not throw).
// Other exception types propagate and fail the test.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const dit::Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace dit_test

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

#include "runtime/atomic_file.h"

namespace dit_test {

// A child process that opens an AtomicFile for `path` (after remove_partial_files_on_signal()
// when `handler`), writes 7 bytes and waits to be killed: returned once its temporary file
// exists. kill_writer() ends and reaps it.
inline pid_t start_partial_writer(const std::string& path, bool handler = false) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    if (handler) dit::remove_partial_files_on_signal();
    dit::AtomicFile f(path);
    f.write("partial", 7);
    (void)::write(fds[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  const bool ready = ::read(fds[0], &c, 1) == 1;
  ::close(fds[0]);
  ::close(fds[1]);
  if (!ready) throw std::runtime_error("the partial writer did not start");
  return pid;
}

// Kills the writer with `sig` and reaps it; returns its wait status.
inline int kill_writer(pid_t pid, int sig) {
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

}  // namespace dit_test
