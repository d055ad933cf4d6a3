// The launcher's private file: rendezvous directory, and the sweep that removes those of
// launchers that were killed before they could remove their own.
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "parallel/rendezvous.h"
#include "runtime/error.h"
#include "runtime/process_identity.h"

namespace dit {

namespace {

constexpr char kPrefix[] = "dit-rdzv-";
constexpr char kOwnerFile[] = "owner";

std::string temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  return (tmp && *tmp) ? tmp : "/tmp";
}

// True when `dir` has an owner record from this process table whose pid is gone.
bool owner_is_gone(const std::string& dir) {
  std::ifstream f(dir + "/" + kOwnerFile);
  std::string table;
  long pid = 0;
  if (!(f >> table >> pid)) return false;  // no record (or not ours to judge): keep
  return table == process_table_id() && pid > 0 && pid != long(getpid()) && !pid_alive(pid_t(pid));
}

}  // namespace

size_t remove_stale_rendezvous_dirs(const std::string& base) noexcept {
  size_t removed = 0;
  try {
    DIR* d = opendir(base.c_str());
    if (!d) return 0;
    std::vector<std::string> stale;
    while (const dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, kPrefix, sizeof(kPrefix) - 1) != 0) continue;
      const std::string p = base + "/" + e->d_name;
      struct stat st;
      if (lstat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
      if (owner_is_gone(p)) stale.push_back(p);
    }
    closedir(d);
    for (const std::string& p : stale) {
      remove_rendezvous_dir(p);
      removed += access(p.c_str(), F_OK) != 0;
    }
  } catch (...) {
  }
  return removed;
}

std::string make_private_rendezvous_dir() {
  const std::string base = temp_base();
  remove_stale_rendezvous_dirs(base);
  std::string templ = base + "/" + kPrefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back(0);
  DIT_CHECK(mkdtemp(buf.data()) != nullptr,
            "cannot create a rendezvous directory in " << base << ": " << std::strerror(errno));
  const std::string dir(buf.data());
  std::ofstream(dir + "/" + kOwnerFile) << process_table_id() << " " << getpid() << "\n";
  return dir;
}

void remove_rendezvous_dir(const std::string& dir) noexcept {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace dit
