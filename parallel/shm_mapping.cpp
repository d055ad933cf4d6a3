#include "parallel/shm_mapping.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1 (uapi/asm-generic/mman-common.h); older headers lack it
#endif

namespace dit {

namespace {
std::mutex pages_mu;  // ranks as threads (tests) map concurrently
ShmPages pages;

void count(size_t bytes, bool huge, const char* why) {
  std::lock_guard<std::mutex> lock(pages_mu);
  (huge ? pages.huge_bytes : pages.small_bytes) += bytes;
  if (!huge) pages.why_small = why;
}
}  // namespace

ShmPages shm_pages() {
  std::lock_guard<std::mutex> lock(pages_mu);
  return pages;
}

size_t shm_file_bytes(size_t bytes) {
  const size_t page = bytes >= kShmHugePage ? kShmHugePage : 4096;
  return (bytes + page - 1) / page * page;
}

bool shm_switch_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

bool shm_huge_pages_allowed() { return !shm_switch_set("DIT_NO_SHM_HUGE_PAGES"); }

void* map_shm(int fd, size_t bytes, bool* huge_out) {
  bool unused = false, *huge = huge_out ? huge_out : &unused;
  *huge = false;
  if (bytes < kShmHugePage) return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (const bool allowed = shm_huge_pages_allowed(); !allowed || bytes % kShmHugePage != 0) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED)
      count(bytes, false, allowed ? "not a whole number of 2 MB pages" : "turned off by DIT_NO_SHM_HUGE_PAGES");
    return p;
  }
  // An address range 2 MB longer than the file, then the file at its first 2 MB boundary, and
  // the rest of the range given back.
  void* range = mmap(nullptr, bytes + kShmHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (range == MAP_FAILED) return MAP_FAILED;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(range);
  const uintptr_t at = (lo + kShmHugePage - 1) / kShmHugePage * kShmHugePage;
  void* p = mmap(reinterpret_cast<void*>(at), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    munmap(range, bytes + kShmHugePage);
    errno = e;
    return MAP_FAILED;
  }
  if (at > lo) munmap(range, at - lo);
  if (const uintptr_t end = at + bytes, hi = lo + bytes + kShmHugePage; hi > end)
    munmap(reinterpret_cast<void*>(end), hi - end);
  // A hint, then the collapse: a failure leaves 4 KB pages, which work the same.
  // EAGAIN is transient (a page locked by another rank mapping the same file): tried again.
  madvise(p, bytes, MADV_HUGEPAGE);
  int e = 0;
  for (int attempt = 0; attempt < 4; ++attempt) {
    if ((*huge = madvise(p, bytes, MADV_COLLAPSE) == 0)) break;
    if ((e = errno) != EAGAIN) break;
    usleep(1000);
  }
  count(bytes, *huge, *huge ? "" : (std::string("MADV_COLLAPSE: ") + std::strerror(e)).c_str());
  return p;
}

}  // namespace dit
