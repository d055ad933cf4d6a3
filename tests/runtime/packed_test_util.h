// Helpers for the packed-weight tests (test_packed_weights.cpp, test_packed_conv.cpp): random
// weights from a seed, and the entries in a packed directory.
#pragma once

#include <filesystem>
#include <random>
#include <string>

#include "runtime/tensor.h"

namespace dit_test {

// Normal random values (mean 0, standard deviation `scale`) from a seed, in type `t`.
inline dit::Tensor random_tensor(const dit::Shape& shape, unsigned seed, dit::DType t = dit::DType::F32,
                                 float scale = 1.f) {
  dit::Tensor x = dit::Tensor::empty(shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(rng);
  return t == dit::DType::F32 ? x : x.to(t);
}

// The *.packed files in `dir` (0 when it does not exist).
inline size_t packed_entries(const std::string& dir) {
  size_t n = 0;
  if (std::filesystem::exists(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir)) n += e.path().extension() == ".packed";
  return n;
}

}  // namespace dit_test
