// Small element-wise ops used around the big kernels (memory-bound). All are hand-written
// OpenMP SIMD loops (runtime/elementwise.cpp, with the simd_math.h approximations of exp,
// SiLU and tanh-GELU); none goes through oneDNN eltwise or resampling.
#pragma once

#include <cstdint>

namespace dit {

void silu(const float* x, float* y, int64_t n);  // y = x·sigmoid(x); x == y allowed
void gelu_tanh(const float* x, float* y, int64_t n);
void add(const float* a, const float* b, float* y, int64_t n);  // y = a + b
// y[b, r, :] = x[b, r, :] + gate[b, :] ⊙ f[b, r, :]
void gated_residual_add(const float* f, const float* gate, float* x, int64_t batch, int64_t rows, int64_t dim);
// Nearest-neighbour 2x upsampling, NCHW: y [n, c, 2h, 2w].
void upsample_nearest2x(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w);

}  // namespace dit
