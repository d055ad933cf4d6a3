// One row of attention's online softmax (flash-attention style), the inner loop of
// runtime/attention.cpp: given a block of scaled logits s[0..cols) and the row's running
// max m and sum l over the blocks before,
//   m' = max(m, max_j s[j]);  p[j] = exp(s[j] - m');  a = exp(m - m') (0 when m = -inf);
//   l' = l·a + Σ_j p[j].
// p may be s (in place); the exponentials are simd::exp_f's polynomial (runtime/simd_math.h).
//
// softmax_row_bf16 stores p rounded to bf16 (to nearest even) in the same pass, for bf16 P·V,
// and uses the cheaper simd::exp_short_scaled_f (4.1e-6 relative, 0 below exp(-87)): 8
// significant bits are kept of each p, so each stored p is within 2^-8 relative of exp in
// double, and l (summed from the f32 values before rounding) within 1e-5 of softmax_row's.
// It takes the logits before their scale (> 0): m is their running max, and
//   p[j] = exp((s[j] - m')·scale),  a = exp((m - m')·scale),
// the scale folded into the exponential's log2 e (no operation more). The Q·Kᵀ matmul then
// has no output scale, which in oneDNN's brgemm on AMX sends every 16 × 16 tile of logits
// through a buffer and the vector registers instead of storing it straight
// (docs/benchmarks.md, "bf16 logits scaled by the softmax"). In f32 the matmul's scale is a
// multiply in registers, and softmax_row takes the logits scaled.
//
// Kernels: scalar, AVX2+FMA, AVX-512 and AVX-512 with the AVX512_BF16 conversion instruction
// (the same bits as AVX-512 for bf16 output; bf16 output on AVX2 is the scalar kernel's, as no
// bf16 matmul runs on AVX2-only CPUs); softmax_row picks the best the CPU has, the
// others are there to be tested against each other and against a double-precision reference.
#pragma once

#include <cstdint>

namespace dit {

// Avx512Bf16: AVX-512 with the AVX512_BF16 conversion instruction (bf16 output; f32 as Avx512).
enum class SoftmaxRowKernel { Generic, Avx2, Avx512, Avx512Bf16 };

bool softmax_row_supported(SoftmaxRowKernel k);
SoftmaxRowKernel softmax_row_best();
// Throws dit::Error for a kernel this CPU cannot run.
void softmax_row_with(SoftmaxRowKernel k, const float* s, float* p, int64_t cols, float* m, float* l, float* a);
void softmax_row_bf16_with(SoftmaxRowKernel k, const float* s, uint16_t* p, int64_t cols, float scale, float* m,
                           float* l, float* a);

// The best kernel for this CPU (chosen once).
void softmax_row(const float* s, float* p, int64_t cols, float* m, float* l, float* a);
void softmax_row_bf16(const float* s, uint16_t* p, int64_t cols, float scale, float* m, float* l, float* a);

}  // namespace dit
