// ShmExchange's windows (parallel/shm_exchange.h): a block per rank in its own /dev/shm file,
// mapped writable by its owner and read-only by the other members, and two counters per rank
// in the group's segment: the last use it published and the last use it finished reading.
// docs/transport.md, "Windows".
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <sstream>

#include <gloo/rendezvous/store.h>

#include "parallel/shm_exchange.h"
#include "parallel/shm_mapping.h"
#include "runtime/error.h"

namespace dit {

namespace {

// This rank's block: a new file in /dev/shm, its memory reserved (no SIGBUS later on a full
// /dev/shm), mapped writable (on 2 MB pages where it can be). Empty `error` on success.
char* create_block(size_t bytes, std::string& name, std::string& error) {
  std::random_device rd;
  std::ostringstream os;
  os << "/dev/shm/dit-gen-" << getpid() << "-w" << std::hex << ((uint64_t(rd()) << 32) | rd());
  name = os.str();
  const int fd = open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    error = "cannot create " + name + ": " + std::strerror(errno);
    name.clear();  // nothing to unlink
    return nullptr;
  }
  void* p = MAP_FAILED;
  if (int e = posix_fallocate(fd, 0, off_t(bytes)); e != 0)
    error = "cannot reserve " + std::to_string((bytes + (1 << 20) - 1) >> 20) + " MB in " + name + ": " + std::strerror(e);
  else if ((p = map_shm(fd, bytes)) == MAP_FAILED)
    error = "cannot map " + name + ": " + std::strerror(errno);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

// Rank j's block, `bytes` long; writable: the ranks of a use may write agreed parts of each
// other's blocks (Ulysses' shared attention tasks: their counters and output rows).
char* map_block(const std::string& name, size_t bytes, int j, std::string& error) {
  const int fd = open(name.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot open " + name + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) != 0 || size_t(st.st_size) != bytes)
    error = name + " is not the window rank " + std::to_string(j) + " made";
  else if ((p = map_shm(fd, bytes)) == MAP_FAILED)
    error = "cannot map " + name + ": " + std::strerror(errno);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

}  // namespace

bool ShmExchange::ensure_window(gloo::rendezvous::Store& store, size_t bytes, const std::function<bool(bool)>& agree,
                                std::string* why) {
  if (bytes <= window_bytes_) return true;  // the same on every rank: every call had the same bytes
  const size_t total = shm_file_bytes(bytes);
  std::string name, error;
  std::vector<char*> blocks(size_t(size_), nullptr);
  blocks[size_t(rank_)] = create_block(total, name, error);
  const std::string published = error.empty() ? name : kNoFile;
  store.set("window/" + std::to_string(rank_), std::vector<char>(published.begin(), published.end()));
  for (int j = 0; j < size_ && error.empty(); ++j) {
    if (j == rank_) continue;
    const std::vector<char> v = store.get("window/" + std::to_string(j));
    const std::string theirs(v.begin(), v.end());
    if (theirs == kNoFile) {
      error = "rank " + std::to_string(j) + " could not create its window";
      break;
    }
    blocks[size_t(j)] = map_block(theirs, total, j, error);
  }
  // Every rank has mapped every block (or said it could not): the names can go.
  const bool all = agree(error.empty());
  if (!name.empty()) unlink(name.c_str());
  if (why) *why = !error.empty() ? error : all ? "" : "another rank could not set up its window";
  if (!all) {
    for (char* b : blocks)
      if (b) munmap(b, total);
    return false;
  }
  unmap_windows();  // every rank is here: nobody reads the old blocks any more
  windows_ = std::move(blocks);
  window_bytes_ = total;
  return true;
}

void ShmExchange::unmap_windows() {
  for (char* b : windows_)
    if (b) munmap(b, window_bytes_);
  windows_.clear();
  window_bytes_ = 0;
}

char* ShmExchange::window_begin() {
  DIT_CHECK(window_bytes_ > 0, "shared memory: window_begin without a window");
  ++window_use_;
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  for (int j = 0; j < size_; ++j)
    if (j != rank_) wait_for(window_released(j), window_use_ - 1, j, deadline);
  return windows_[size_t(rank_)];
}

void ShmExchange::window_publish() {
  DIT_CHECK(window_use_ > 0, "shared memory: window_publish without window_begin");
  window_posted(rank_).store(++window_published_, std::memory_order_release);
}

const char* ShmExchange::window_peer(int j) {
  DIT_CHECK(j >= 0 && j < size_ && window_bytes_ > 0, "shared memory: no window of rank " << j);
  DIT_CHECK(window_published_ > 0, "shared memory: window_peer before this rank published");
  if (j != rank_)  // rank j's publication of the same count as this rank's last (every rank publishes in step)
    wait_for(window_posted(j), window_published_, j, std::chrono::steady_clock::now() + opts_.timeout);
  return windows_[size_t(j)];
}

char* ShmExchange::window_shared(int j) {
  DIT_CHECK(j >= 0 && j < size_ && window_bytes_ > 0, "shared memory: no window of rank " << j);
  return windows_[size_t(j)];
}

void ShmExchange::window_wait(std::atomic<uint64_t>& c, uint64_t target) {
  wait_for(c, target, -1, std::chrono::steady_clock::now() + opts_.timeout);
}

void ShmExchange::window_release() { window_released(rank_).store(window_use_, std::memory_order_release); }

}  // namespace dit
