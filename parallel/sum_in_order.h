// Sums of the ranks' contributions in rank order, the one order every reduction of the
// parallel layer uses (shared-memory reduce-scatter and all-reduce, tensor parallelism's
// window reduction), so that every path gives the same bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "parallel/strided_block.h"

namespace dit {

// sum[i] = ((x[0][at + i] + x[1][at + i]) + x[2][at + i]) + ... for n >= 2 arrays and
// i < len; sum may be one of them shifted by at (a rank's share of an all-reduce, summed in
// place).
inline void sum_in_order_serial(const float* const* x, size_t n, size_t at, float* sum, size_t len) {
  if (n == 2) {  // each element read before it is written
    const float *a = x[0] + at, *b = x[1] + at;
    for (size_t i = 0; i < len; ++i) sum[i] = a[i] + b[i];
    return;
  }
  constexpr size_t kBlock = 1024;
  float acc[kBlock];
  for (size_t b = 0; b < len; b += kBlock) {
    const size_t m = std::min(kBlock, len - b);
    for (size_t i = 0; i < m; ++i) acc[i] = x[0][at + b + i] + x[1][at + b + i];
    for (size_t r = 2; r < n; ++r)
      for (size_t i = 0; i < m; ++i) acc[i] += x[r][at + b + i];
    std::memcpy(sum + b, acc, m * sizeof(float));
  }
}

// sum[i] = the sum in rank order of x[r][i], shared among the calling thread's team in
// contiguous parts (each element summed in the same order, so the same bits).
inline void sum_in_order(const float* const* x, size_t n, float* sum, size_t len) {
  parallel_split(len, sizeof(float), [&](size_t first, size_t m) { sum_in_order_serial(x, n, first, sum + first, m); });
}

}  // namespace dit
