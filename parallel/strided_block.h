// A block of a strided array, as the strided all-to-all sends and receives it (Ulysses' heads
// of every token row, one rank's token rows of every batch item): `rows` runs of `width`
// elements, `stride` apart, from `offset`. Its elements in order — row by row — are the block's
// logical elements 0 .. count()-1, which is how a block travels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

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

}  // namespace dit
