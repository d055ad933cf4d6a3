#include "runtime/atomic_file.h"

#include <signal.h>

#include <csignal>
#include <cstring>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "runtime/error.h"

namespace dit {
namespace {

std::string errno_str() { return std::strerror(errno); }

std::string temp_name_for(const std::string& path) {
  std::random_device rd;
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%08x", long(::getpid()), unsigned(rd()));
  return path + suffix;
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Makes the rename durable; failures here are not fatal (some filesystems refuse it).
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// The temporary file of the write in progress, for the signal handler (async-signal-safe:
// a fixed buffer and a flag).
char g_partial[4096];
volatile sig_atomic_t g_has_partial = 0;

void track_partial(const std::string& tmp) {
  g_has_partial = 0;
  if (tmp.size() + 1 > sizeof g_partial) return;
  std::memcpy(g_partial, tmp.c_str(), tmp.size() + 1);
  g_has_partial = 1;
}

void untrack_partial(const std::string& tmp) {
  if (g_has_partial && tmp == g_partial) g_has_partial = 0;
}

extern "C" void remove_partial_and_reraise(int sig) {
  if (g_has_partial) ::unlink(g_partial);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void remove_partial_files_on_signal() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = remove_partial_and_reraise;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  DIT_CHECK(!path.empty(), "cannot write a file with an empty path");
  for (int attempt = 0; attempt < 8 && fd_ < 0; ++attempt) {
    tmp_ = temp_name_for(path);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) DIT_FAIL(path << ": cannot create temporary file " << tmp_ << ": " << errno_str());
  track_partial(tmp_);
}

AtomicFile::~AtomicFile() {
  untrack_partial(tmp_);
  if (committed_) return;
  close_fd();
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void AtomicFile::write(const void* data, size_t n) {
  DIT_CHECK(fd_ >= 0 && !committed_, path_ << ": write after commit");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) DIT_FAIL(path_ << ": write failed: " << errno_str());
    p += w;
    n -= size_t(w);
  }
}

void AtomicFile::commit() {
  DIT_CHECK(fd_ >= 0 && !committed_, path_ << ": commit called twice");
  if (::fsync(fd_) != 0) DIT_FAIL(path_ << ": fsync failed: " << errno_str());
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) DIT_FAIL(path_ << ": close failed: " << errno_str());
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) DIT_FAIL(path_ << ": rename from " << tmp_ << " failed: " << errno_str());
  committed_ = true;
  untrack_partial(tmp_);
  fsync_dir(dir_of(path_));
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  AtomicFile f(path);
  f.write(data, n);
  f.commit();
}

}  // namespace dit
