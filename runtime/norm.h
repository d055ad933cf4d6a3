// Normalisations.
//  LayerNormModulate: y = LN(x)·(1 + scale[b]) + shift[b] (no affine weights, eps), on
//    oneDNN layer normalisation with the modulation as its scale/shift. With null
//    scale/shift it is a plain LayerNorm.
//  GroupNorm: runtime/group_norm.h.
#pragma once

#include <memory>

#include "runtime/tensor.h"

namespace dit {

class LayerNormModulate {
 public:
  LayerNormModulate();
  LayerNormModulate(int64_t batch, int64_t rows, int64_t dim, float eps);
  LayerNormModulate(LayerNormModulate&&) noexcept;
  LayerNormModulate& operator=(LayerNormModulate&&) noexcept;
  ~LayerNormModulate();
  // x, y: [batch, rows, dim]; shift, scale: [batch, dim] or both null. x == y allowed.
  void run(const float* x, float* y, const float* shift, const float* scale) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dit
