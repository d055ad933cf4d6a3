// A tensor of normal random values (mean 0, standard deviation `scale`) from a seed, for tests.
#pragma once

#include <cstdint>
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

}  // namespace dit_test
