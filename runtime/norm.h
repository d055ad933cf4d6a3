// Normalisations.
//  LayerNormModulate: y = LN(x)·(1 + scale[b]) + shift[b] (no affine weights, eps), on
//    oneDNN layer normalisation with the modulation as its scale/shift. With null
//    scale/shift it is a plain LayerNorm. With a bf16 y (the input of a bf16 Linear) it runs
//    our own row kernel instead, which writes y rounded to nearest even in the same pass:
//    oneDNN 2.7's layer normalisation writes its input's type, and an f32 y would be written
//    whole, read back and converted by the Linear (about 3/4 of the norm's memory traffic).
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
  // The same into bf16 (x != y): mean and variance in f32 per row (two passes, like oneDNN's),
  // y within rounding of the f32 form's value rounded to bf16.
  void run(const float* x, uint16_t* y, const float* shift, const float* scale) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dit
