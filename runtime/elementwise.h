// Small element-wise ops used around the big kernels (memory-bound). All are hand-written
// OpenMP SIMD loops (runtime/elementwise.cpp, with the simd_math.h approximations of exp,
// SiLU and tanh-GELU); none goes through oneDNN eltwise or resampling.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"

namespace dit {

void silu(const float* x, float* y, int64_t n);  // y = x·sigmoid(x); x == y allowed
void gelu_tanh(const float* x, float* y, int64_t n);
void add(const float* a, const float* b, float* y, int64_t n);  // y = a + b
// y[b, r, :] = x[b, r, :] + gate[b, :] ⊙ f[b, r, :]
void gated_residual_add(const float* f, const float* gate, float* x, int64_t batch, int64_t rows, int64_t dim);
// y[i] = x[i] rounded to bf16 (to nearest even: f32_to_bf16's bits for every non-NaN value), on
// the calling thread (it is the inner loop of threaded kernels).
void to_bf16(const float* x, uint16_t* y, int64_t n);
// Nearest-neighbour 2x upsampling, channels last: x [n, h, w, c] f32 -> y [n, 2h, 2w, c] as
// `out` (F32, or BF16 rounded to nearest even).
void upsample_nearest2x(const float* x, void* y, DType out, int64_t n, int64_t h, int64_t w, int64_t c);

}  // namespace dit
