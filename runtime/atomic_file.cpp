#include "runtime/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "runtime/error.h"
#include "runtime/process_identity.h"

namespace dit {
namespace {

std::string errno_str() { return std::strerror(errno); }

constexpr char kTempMarker[] = ".dit-tmp.";

std::string temp_name_for(const std::string& path) {
  std::random_device rd;
  char suffix[96];
  std::snprintf(suffix, sizeof suffix, "%s%s.%ld.%08x", kTempMarker, process_table_tag().c_str(), long(::getpid()),
                unsigned(rd()));
  return path + suffix;
}

// "a.png.dit-tmp.<table>.<pid>.<random>" -> table and pid; false for any other name.
bool parse_temp_name(const std::string& name, std::string& table, pid_t& pid) {
  const size_t m = name.rfind(kTempMarker);
  if (m == std::string::npos || m == 0) return false;
  const std::string rest = name.substr(m + sizeof(kTempMarker) - 1);
  const size_t d1 = rest.find('.'), d2 = d1 == std::string::npos ? d1 : rest.find('.', d1 + 1);
  if (d1 != 8 || d2 == std::string::npos || rest.find('.', d2 + 1) != std::string::npos) return false;
  table = rest.substr(0, 8);
  const std::string p = rest.substr(d1 + 1, d2 - d1 - 1);
  char* end = nullptr;
  const long v = std::strtol(p.c_str(), &end, 10);
  if (p.empty() || *end != 0 || v <= 0) return false;
  pid = pid_t(v);
  return rest.size() - d2 - 1 == 8;
}

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
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

void check_replaceable(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;
  DIT_FAIL(path << ": is " << file_kind(st.st_mode) << ", not a regular file; refusing to replace it");
}

size_t remove_stale_temp_files(const std::string& dir) noexcept {
  size_t removed = 0;
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (!d) return 0;
  while (const dirent* e = ::readdir(d)) {
    std::string table;
    pid_t pid = 0;
    if (!parse_temp_name(e->d_name, table, pid) || table != process_table_tag() || pid_alive(pid)) continue;
    const std::string p = (dir.empty() ? std::string(".") : dir) + "/" + e->d_name;
    struct stat st;
    if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::unlink(p.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  DIT_CHECK(!path.empty(), "cannot write a file with an empty path");
  check_replaceable(path);
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
  check_replaceable(path_);  // again: something else may have been put there meanwhile
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
