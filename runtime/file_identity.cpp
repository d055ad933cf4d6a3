#include "runtime/file_identity.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"

namespace dit {

namespace {
bool stat_identity(const std::string& path, uint64_t& size, int64_t& mtime_ns) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  size = uint64_t(st.st_size);
  mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}
}  // namespace

FileIdentity file_identity(const std::string& path) {
  FileIdentity id;
  std::error_code ec;
  id.path = std::filesystem::canonical(path, ec).string();
  if (ec) id.path = path;
  DIT_CHECK(stat_identity(path, id.size, id.mtime_ns), path << ": cannot stat: " << std::strerror(errno));
  return id;
}

std::string FileIdentity::str() const {
  return path + "|" + std::to_string(size) + "|" + std::to_string(mtime_ns);
}

bool is_current(const FileIdentity& id) noexcept {
  FileIdentity now;
  if (id.path.empty() || !stat_identity(id.path, now.size, now.mtime_ns)) return false;
  return now.size == id.size && now.mtime_ns == id.mtime_ns;
}

}  // namespace dit
