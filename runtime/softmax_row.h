// One row of attention's online softmax (flash-attention style), the inner loop of
// runtime/attention.cpp: given a block of scaled logits s[0..cols) and the row's running
// max m and sum l over the blocks before,
//   m' = max(m, max_j s[j]);  p[j] = exp(s[j] - m');  a = exp(m - m') (0 when m = -inf);
//   l' = l·a + Σ_j p[j].
// p may be s (in place). Three kernels with the same polynomial exp (runtime/simd_math.h):
// scalar, AVX2+FMA and AVX-512; softmax_row picks the best the CPU has, the others are there
// to be tested against each other and against a double-precision reference.
#pragma once

#include <cstdint>

namespace dit {

enum class SoftmaxRowKernel { Generic, Avx2, Avx512 };

bool softmax_row_supported(SoftmaxRowKernel k);
SoftmaxRowKernel softmax_row_best();
// Throws dit::Error for a kernel this CPU cannot run.
void softmax_row_with(SoftmaxRowKernel k, const float* s, float* p, int64_t cols, float* m, float* l, float* a);

// The best kernel for this CPU (chosen once).
void softmax_row(const float* s, float* p, int64_t cols, float* m, float* l, float* a);

}  // namespace dit
