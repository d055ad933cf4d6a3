// Initial noise identical to torch's CPU generator:
//   torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))   (float32)
// so that a seed gives the same picture as a diffusers pipeline. Algorithm: docs/noise.md.
// torch seeds its mt19937 with the low 32 bits of the 64-bit seed.
//
//   Tensor noise = torch_randn(42, {1, 4, 32, 32});
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace dit {

// Fills out[0..n) with N(0,1) samples. n must be >= 16 (torch uses another path below 16).
void torch_randn(uint64_t seed, float* out, int64_t n);
Tensor torch_randn(uint64_t seed, const Shape& shape);

}  // namespace dit
