// Normalisations.
//  LayerNormModulate: y = LN(x)·(1 + scale[b]) + shift[b] (no affine weights, eps), on
//    oneDNN layer normalisation with the modulation as its scale/shift. With null
//    scale/shift it is a plain LayerNorm.
//  GroupNorm: NCHW group normalisation with affine weights and optional fused SiLU
//    (not in oneDNN 2.6, written here).
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

struct GroupNormSpec {
  int64_t batch = 1, channels = 0, height = 0, width = 0, groups = 32;
  float eps = 1e-6f;
  bool silu = false;  // apply SiLU after the affine transform
};

// x, y: [batch, channels, height, width]; gamma, beta: [channels]. x == y allowed.
void group_norm(const GroupNormSpec& s, const float* x, float* y, const float* gamma, const float* beta);

}  // namespace dit
