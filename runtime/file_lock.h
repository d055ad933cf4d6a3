// An exclusive advisory lock (flock) on a file, held for the lifetime of the object: the
// weight caches' writers take turns under <dir>/.lock (processes, and threads with their own
// FileLock, exclude each other).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/error.h"

namespace dit {

class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    DIT_CHECK(fd_ >= 0, path << ": cannot create the weight-cache lock: " << std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd_);
      DIT_FAIL(path << ": cannot lock: " << std::strerror(e));
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace dit
