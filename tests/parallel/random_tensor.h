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

}  // namespace dit_test
