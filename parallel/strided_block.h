// A block of a strided array, as the strided all-to-all sends and receives it (Ulysses' heads
// of every token row, one rank's token rows of every batch item): `rows` runs of `width`
// elements, `stride` apart, from `offset`. Its elements in order — row by row — are the block's
// logical elements 0 .. count()-1, which is how a block travels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "runtime/parallel_for.h"

namespace dit {

struct StridedBlock {
  size_t offset = 0, rows = 0, width = 0, stride = 0;
  size_t count() const { return rows * width; }
  // Where logical element i lies in the array.
  size_t at(size_t i) const { return offset + i / width * stride + i % width; }
  // The same block counted in units `unit` times smaller (floats -> bytes: 4).
  StridedBlock scaled(size_t unit) const { return {offset * unit, rows, width * unit, stride * unit}; }
};

// A contiguous run, viewed as one endless row (a slot, a packed buffer).
inline constexpr StridedBlock kFlat{0, 1, SIZE_MAX, 0};

// Visits the runs of logical elements [from, from + n) of block b that are contiguous in the
// array: f(position in the array, offset from `from`, length).
template <class F>
void for_each_run(const StridedBlock& b, size_t from, size_t n, F&& f) {
  for (size_t done = 0; done < n;) {
    const size_t i = from + done, len = std::min(n - done, b.width - i % b.width);
    f(b.at(i), done, len);
    done += len;
  }
}

// Copies logical elements [from, from + n) of block a in array `src` to logical elements
// [to, to + n) of block b in array `dst`, one memmove per stretch that is contiguous in both
// (a run may be copied onto itself: an all-reduce's own share).
template <class T>
void copy_block(const T* src, const StridedBlock& a, size_t from, T* dst, const StridedBlock& b, size_t to,
                size_t n) {
  while (n > 0) {
    const size_t len = std::min({n, a.width - from % a.width, b.width - to % b.width});
    std::memmove(dst + b.at(to), src + a.at(from), len * sizeof(T));
    from += len;
    to += len;
    n -= len;
  }
}

// Copies from this many bytes up are shared among the calling thread's OpenMP team (the rank's
// threads, idle while it communicates): one thread copies about 10 GB/s, far less than a
// machine's memory bandwidth, and a rank with 8 threads otherwise moves its collectives' bytes
// on one of them.
inline constexpr size_t kParallelCopyBytes = size_t(256) << 10;

// parallel_split(n, unit_bytes, f): f(first, count) over [0, n) in one contiguous part per
// thread of the team, each at least kParallelCopyBytes / 4 bytes and a whole number of cache
// lines (n's units are unit_bytes); inline when small, with one thread, or inside a region.
template <class F>
void parallel_split(size_t n, size_t unit_bytes, F&& f) {
  const size_t bytes = n * unit_bytes, min_part = kParallelCopyBytes / 4;
  const size_t team = size_t(std::max(1, omp_get_max_threads()));
  const size_t parts = std::min(team, std::max<size_t>(1, bytes / min_part));
  if (bytes < kParallelCopyBytes || parts <= 1) return f(size_t(0), n);
  const size_t line = std::max<size_t>(1, 64 / std::max<size_t>(1, unit_bytes));
  const size_t per = ((n + parts - 1) / parts + line - 1) / line * line;
  parallel_for(int64_t(parts), true, [&](int64_t p) {
    const size_t first = size_t(p) * per;
    if (first < n) f(first, std::min(per, n - first));
  });
}

// copy_block, large copies shared among the team (the same bytes to the same places).
template <class T>
void copy_block_parallel(const T* src, const StridedBlock& a, size_t from, T* dst, const StridedBlock& b, size_t to,
                         size_t n) {
  parallel_split(n, sizeof(T),
                 [&](size_t first, size_t len) { copy_block(src, a, from + first, dst, b, to + first, len); });
}

}  // namespace dit
