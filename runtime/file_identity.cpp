#include "runtime/file_identity.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/printable.h"

namespace dit {

namespace {
constexpr uint64_t kTellRemovedFrom = uint64_t(256) << 20;  // bytes removed before remove_files_if says so

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

RemovedFiles remove_files_if(const std::string& dir, const std::string& suffix, const char* what,
                             const std::function<bool(const std::string&)>& stale) noexcept {
  namespace fs = std::filesystem;
  RemovedFiles r;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string path = it->path().string(), name = it->path().filename().string();
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    std::error_code fe;
    if (!it->is_regular_file(fe)) continue;
    bool remove = false;
    try {
      remove = stale(path);
    } catch (const std::exception&) {  // cannot be judged: stays
    }
    const uint64_t size = it->file_size(fe);
    if (remove && fs::remove(path, fe)) {
      ++r.files;
      r.bytes += size;
    }
  }
  if (r.bytes >= kTellRemovedFrom)
    std::fprintf(stderr, "weight cache: removed %zu %s (%.0f MB) from %s\n", r.files, what, double(r.bytes) / 1e6,
                 printable(dir).c_str());
  return r;
}

}  // namespace dit
