// Helpers for comparing dit-gen output with golden data from the independent PyTorch
// reference (/work/shared/reference/dit_reference.py, copied into tests/data/golden).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/safetensors.h"
#include "runtime/tensor.h"

namespace dit_test {

inline std::string data_path(const std::string& rel) { return std::string(DIT_TEST_DATA) + "/" + rel; }

inline dit::Tensor golden(const std::string& file, const std::string& name) {
  auto f = dit::SafeTensorsFile::open(data_path("golden/" + file));
  return f->get(name);
}

struct Diff {
  double max_abs = 0, ref_max = 0;
  double rel() const { return ref_max > 0 ? max_abs / ref_max : max_abs; }
};

// Max |a - b| and max |b| (b is the reference). Any NaN or Inf in a or b, or a size
// mismatch, makes max_abs (and so rel()) infinite: std::max(acc, NaN) would keep acc and
// silently pass an all-NaN output.
inline Diff diff(const dit::Tensor& a, const dit::Tensor& b) {
  Diff d;
  const int64_t n = std::min(a.numel(), b.numel());
  for (int64_t i = 0; i < n; ++i) {
    const double x = a.f32()[i], y = b.f32()[i];
    if (!std::isfinite(x) || !std::isfinite(y)) {
      d.max_abs = INFINITY;
      continue;
    }
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    d.ref_max = std::max(d.ref_max, std::fabs(y));
  }
  if (a.numel() != b.numel()) d.max_abs = INFINITY;
  return d;
}

}  // namespace dit_test
