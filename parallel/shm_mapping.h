// Shared-memory files (/dev/shm) mapped by the ranks of one machine: the group's segment and its
// windows (parallel/shm_exchange.h), on 2 MB pages where the kernel gives them.
//
//   const size_t n = shm_file_bytes(bytes);   // the file's size: whole 2 MB pages from 2 MB up
//   posix_fallocate(fd, 0, n);                // every page allocated (a collapse needs them)
//   void* p = map_shm(fd, n);                 // MAP_FAILED and errno on failure
//   ...
//   munmap(p, n);
//
// Why: the windows are read and written a 288-byte row at a time across tens of MB (Ulysses'
// planes, the shared rows). On 4 KB pages each page costs a TLB walk; on the 2-vCPU VM the
// same copy of a layer's q, k, v planes took 30-120 ms on 4 KB pages once the process's other
// memory had been used, against 5 ms on 2 MB pages (docs/transport.md, "2 MB pages"). The
// step's own tensors already lie on 2 MB pages (runtime/tensor.cpp, MADV_HUGEPAGE).
//
// How: /dev/shm files get huge pages only from the tmpfs mount's huge= option or
// /sys/kernel/mm/transparent_hugepage/shmem_enabled, `never` by default (Debian). MADV_COLLAPSE
// (Linux 6.1) makes them regardless: it copies a mapped range's 4 KB pages into 2 MB ones (in
// the file: the other processes' mappings then map those), once, when the file is mapped. Where
// it fails (an older kernel: EINVAL; no free 2 MB of memory: EAGAIN or ENOMEM) the mapping stays
// on 4 KB pages, as before, and works the same. DIT_NO_SHM_HUGE_PAGES=1 skips it (to compare).
#pragma once

#include <cstddef>
#include <string>

namespace dit {

constexpr size_t kShmHugePage = size_t(2) << 20;

// The size to give a shared-memory file that must hold `bytes`: whole 4 KB pages, or whole
// 2 MB pages from 2 MB up (a collapse takes whole 2 MB pages only).
size_t shm_file_bytes(size_t bytes);

// Maps `bytes` (shm_file_bytes) of the shared-memory file `fd`, read and write, shared; from
// 2 MB up at a 2 MB boundary and collapsed into 2 MB pages. *huge (if given): whether all of it
// is on 2 MB pages (shm_pages() counts it either way). MAP_FAILED, with errno set, when the
// mapping itself fails.
void* map_shm(int fd, size_t bytes, bool* huge = nullptr);

// Whether the switch `name` (DIT_NO_SHM_WINDOWS, DIT_NO_SHM_HUGE_PAGES) is set: to anything
// but nothing or "0".
bool shm_switch_set(const char* name);

// Whether DIT_NO_SHM_HUGE_PAGES leaves the collapse on.
bool shm_huge_pages_allowed();

// What map_shm has mapped in this process so far, of the mappings of 2 MB and more: on 2 MB
// pages, left on 4 KB pages, and why the last of those was (for -v and dit-bench).
struct ShmPages {
  size_t huge_bytes = 0, small_bytes = 0;
  std::string why_small;
};
ShmPages shm_pages();

}  // namespace dit
