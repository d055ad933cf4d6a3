// Shared-memory files on 2 MB pages (parallel/shm_mapping.h): the sizes, the alignment, what
// the kernel actually maps (read back from /proc/self/smaps, not from our own claim), the data
// seen through a second mapping as another rank would, and the switch that turns it off.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "parallel/process_group.h"
#include "parallel/shm_mapping.h"
#include "runtime/error.h"
#include "thread_ranks.h"

using namespace dit;
using namespace std::chrono_literals;

namespace {

// A new /dev/shm file of `bytes`, every page allocated (as the segment and windows are), unlinked.
int shm_file(size_t bytes) {
  char name[] = "/dev/shm/dit-test-mapping-XXXXXX";
  const int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  unlink(name);
  REQUIRE(posix_fallocate(fd, 0, off_t(bytes)) == 0);
  return fd;
}

// A new file of `bytes` mapped by map_shm, with shm_pages() before and after; unmapped at the end.
struct Mapped {
  size_t bytes;
  void* p = MAP_FAILED;
  bool huge = true;
  ShmPages before, after;
  explicit Mapped(size_t n) : bytes(n) {
    const int fd = shm_file(n);
    before = shm_pages();
    p = map_shm(fd, n, &huge);
    after = shm_pages();
    close(fd);
    REQUIRE(p != MAP_FAILED);
  }
  ~Mapped() {
    if (p != MAP_FAILED) munmap(p, bytes);
  }
};

// kB of the mapping that starts at `p` that the kernel maps with 2 MB page-table entries
// (ShmemPmdMapped in /proc/self/smaps); -1 if no mapping starts there.
long pmd_mapped_kb(const void* p) {
  std::ostringstream head;
  head << std::hex << reinterpret_cast<uintptr_t>(p) << "-";
  std::ifstream f("/proc/self/smaps");
  bool in = false;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(head.str(), 0) == 0) in = true;
    else if (in && line.rfind("ShmemPmdMapped:", 0) == 0) return std::stol(line.substr(15));
  }
  return -1;
}

// Whether map_shm gives this machine 2 MB pages (a file of its own, mapped and let go).
bool machine_gives_huge_pages() { return Mapped(kShmHugePage).huge; }

struct EnvVar {  // sets a variable for a scope, then removes it
  const char* name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name); }
};

}  // namespace

TEST_CASE("shm_file_bytes: whole 4 KB pages below 2 MB, whole 2 MB pages from 2 MB up", "[parallel][shm]") {
  CHECK(shm_file_bytes(1) == 4096);
  CHECK(shm_file_bytes(4096) == 4096);
  CHECK(shm_file_bytes(4097) == 8192);
  CHECK(shm_file_bytes(kShmHugePage - 1) == kShmHugePage);
  CHECK(shm_file_bytes(kShmHugePage) == kShmHugePage);
  CHECK(shm_file_bytes(kShmHugePage + 1) == 2 * kShmHugePage);
  CHECK(shm_file_bytes(5 * kShmHugePage + 4096) == 6 * kShmHugePage);
}

TEST_CASE("map_shm: 2 MB aligned, on 2 MB pages when it says so, the data shared between mappings",
          "[parallel][shm]") {
  const size_t bytes = 3 * kShmHugePage;
  const int fd = shm_file(bytes);
  bool huge_a = false, huge_b = false;
  const ShmPages before = shm_pages();
  char* a = static_cast<char*>(map_shm(fd, bytes, &huge_a));  // the owner's mapping
  char* b = static_cast<char*>(map_shm(fd, bytes, &huge_b));  // another rank's
  close(fd);
  REQUIRE(a != MAP_FAILED);
  REQUIRE(b != MAP_FAILED);
  CHECK(reinterpret_cast<uintptr_t>(a) % kShmHugePage == 0);
  CHECK(reinterpret_cast<uintptr_t>(b) % kShmHugePage == 0);
  // What the kernel maps, against what map_shm said.
  CHECK(pmd_mapped_kb(a) == (huge_a ? long(bytes >> 10) : 0));
  CHECK(pmd_mapped_kb(b) == (huge_b ? long(bytes >> 10) : 0));
  const ShmPages after = shm_pages();
  CHECK(after.huge_bytes - before.huge_bytes == (huge_a ? bytes : 0) + (huge_b ? bytes : 0));
  CHECK(after.small_bytes - before.small_bytes == (huge_a ? 0 : bytes) + (huge_b ? 0 : bytes));
  if (!huge_a || !huge_b) {
    CHECK(after.why_small.rfind("MADV_COLLAPSE: ", 0) == 0);
    WARN("this kernel left the mapping on 4 KB pages: " << after.why_small);
  }
  // Written through one mapping, read through the other, every page and the last byte.
  for (size_t i = 0; i < bytes; i += 4093) a[i] = char(i * 7 + 1);
  a[bytes - 1] = 42;
  for (size_t i = 0; i < bytes; i += 4093) REQUIRE(b[i] == char(i * 7 + 1));
  CHECK(b[bytes - 1] == 42);
  munmap(a, bytes);
  munmap(b, bytes);
}

TEST_CASE("map_shm: below 2 MB, or with DIT_NO_SHM_HUGE_PAGES=1, 4 KB pages as before", "[parallel][shm]") {
  {
    const Mapped m(kShmHugePage - 4096);
    CHECK_FALSE(m.huge);
    CHECK(pmd_mapped_kb(m.p) == 0);
    CHECK(m.after.small_bytes == m.before.small_bytes);  // small mappings are not counted
  }
  {
    EnvVar off("DIT_NO_SHM_HUGE_PAGES", "1");
    CHECK_FALSE(shm_huge_pages_allowed());
    const Mapped m(2 * kShmHugePage);
    CHECK_FALSE(m.huge);
    CHECK(pmd_mapped_kb(m.p) == 0);
    CHECK(m.after.small_bytes - m.before.small_bytes == m.bytes);
    CHECK(m.after.why_small == "turned off by DIT_NO_SHM_HUGE_PAGES");
  }
  EnvVar zero("DIT_NO_SHM_HUGE_PAGES", "0");
  CHECK(shm_huge_pages_allowed());
}

TEST_CASE("a group's windows of 2 MB and more lie on 2 MB pages wherever map_shm gives them", "[parallel][shm]") {
  // The plumbing: ensure_window sizes and maps every rank's block through map_shm, the owner's
  // and the others' mappings alike. 3 MB asked: 4 MB blocks, each on 2 MB pages or none.
  const bool want_huge = machine_gives_huge_pages();
  const std::string err = dit_test::run_rank_threads(2, 20s, [&](std::shared_ptr<ProcessGroup> world, int r) {
    if (!world->uses_shared_memory()) DIT_FAIL("not on shared memory: " << world->shared_memory_note());
    if (!world->ensure_window(3 << 20)) DIT_FAIL("no window: " << world->window_note());
    if (world->window_bytes() != 2 * kShmHugePage) DIT_FAIL("window of " << world->window_bytes() << " bytes");
    float* mine = world->window_begin();
    const long want_kb = want_huge ? long(2 * kShmHugePage >> 10) : 0;
    if (long kb = pmd_mapped_kb(mine); kb != want_kb)
      DIT_FAIL("rank " << r << "'s own block: " << kb << " kB on 2 MB pages, expected " << want_kb);
    mine[0] = float(r + 1);
    mine[(3 << 20) / 4 - 1] = float(r + 10);
    world->window_publish();
    const int peer = 1 - r;
    const float* theirs = world->window_peer(peer);
    if (long kb = pmd_mapped_kb(theirs); kb != want_kb)
      DIT_FAIL("rank " << r << "'s mapping of rank " << peer << "'s block: " << kb << " kB on 2 MB pages, expected "
                       << want_kb);
    if (theirs[0] != float(peer + 1) || theirs[(3 << 20) / 4 - 1] != float(peer + 10))
      DIT_FAIL("rank " << r << " reads the wrong values in rank " << peer << "'s block");
    world->window_release();
    world->shutdown();
  });
  INFO(err);
  CHECK(err.empty());
  if (!want_huge) WARN("map_shm gives this machine 4 KB pages: " << shm_pages().why_small);
}
