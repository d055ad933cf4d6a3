// RMS normalisation (T5LayerNorm, "RMSNorm"): no mean subtraction, no bias.
//
//   rms_norm(x, w, y, rows, dim, 1e-6f);   // y[r, :] = w ⊙ (x[r, :] · rsqrt(mean(x[r, :]²) + eps))
//
// The mean of squares is accumulated in double and rounded to f32 before eps is added (torch
// computes it in f32; the difference is within an ulp or two of the result). Operation order
// otherwise as transformers: w * (x * rsqrt(var + eps)).
#pragma once

#include <cstdint>

namespace dit {

// x, y: [rows, dim] f32 contiguous (x == y allowed); w: [dim] f32.
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps);

}  // namespace dit
