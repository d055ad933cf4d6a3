// Tensors for the parallel tests: one of normal random values (mean 0, standard deviation
// `scale`) from a seed, and whether two hold the same bits.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>

#include "runtime/tensor.h"

namespace dit_test {

inline dit::Tensor randn(const dit::Shape& s, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.f, scale);
  dit::Tensor t = dit::Tensor::empty(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = n(g);
  return t;
}

inline bool same_bits(const dit::Tensor& a, const dit::Tensor& b) {
  return a.numel() == b.numel() && a.dtype() == b.dtype() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Rows computed in tasks against the same rows computed at once: the same bits where the matmul's
// rows do not depend on how many there are (`exact`, matmul_rows_independent()), else within
// 1e-5 relative L2 (f32).
inline bool same_rows(const dit::Tensor& a, const dit::Tensor& b, bool exact) {
  if (exact || a.dtype() != dit::DType::F32 || b.dtype() != dit::DType::F32 || a.numel() != b.numel())
    return same_bits(a, b);
  double d = 0, n = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    d += double(a.f32()[i] - b.f32()[i]) * double(a.f32()[i] - b.f32()[i]);
    n += double(b.f32()[i]) * double(b.f32()[i]);
  }
  return d <= 1e-10 * n;
}

}  // namespace dit_test
