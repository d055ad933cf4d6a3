#include "runtime/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "runtime/parallel_for.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14 (uapi/asm-generic/mman-common.h)
#endif

namespace dit {

namespace {
constexpr uintptr_t kPiece = uintptr_t(2) << 20;  // a transparent huge page

// Whether the kernel knows MADV_POPULATE_WRITE (5.14): advice it does not know is EINVAL
// even for an empty range, which it otherwise accepts without looking at it.
bool populate_known(uintptr_t page) {
  static const bool known = ::madvise(reinterpret_cast<void*>(page), 0, MADV_POPULATE_WRITE) == 0;
  return known;
}

// [b, e), page-aligned: resident, content kept.
void populate(uintptr_t b, uintptr_t e, uintptr_t page) {
  if (populate_known(page)) {
    // Advisory: a range the kernel refuses (out of memory) is left to its first writes.
    (void)::madvise(reinterpret_cast<void*>(b), e - b, MADV_POPULATE_WRITE);
    return;
  }
  // An older kernel: fault each page by writing back a byte read from it (the caller's
  // writable buffer, which nothing else writes meanwhile).
  for (uintptr_t q = b; q < e; q += page) {
    volatile char* c = reinterpret_cast<volatile char*>(q);
    *c = *c;
  }
}
}  // namespace

void prefault(void* p, size_t bytes) {
  if (!p || bytes == 0) return;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  // Whole pages inside the buffer only: a partial page at either end may be shared with
  // another allocation, and is faulted by its first write as before.
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  if (end <= begin) return;
  const uintptr_t first = begin & ~(kPiece - 1);
  const int64_t pieces = int64_t((end - first + kPiece - 1) / kPiece);
  parallel_for(pieces, true, [&](int64_t i) {  // static schedule: contiguous shares
    const uintptr_t b = std::max(begin, first + uintptr_t(i) * kPiece);
    const uintptr_t e = std::min(end, first + uintptr_t(i + 1) * kPiece);
    if (b < e) populate(b, e, page);
  });
}

}  // namespace dit
