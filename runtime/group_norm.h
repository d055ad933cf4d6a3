// GroupNorm over channels-last activations, with affine weights and an optional fused SiLU
// (oneDNN 2.6 has no group normalisation). The math of torch.nn.GroupNorm (diffusers' VAE):
// for each image n and group g of C/G consecutive channels,
//   mean, var  over the group's channels and all H·W pixels (biased variance; two passes,
//              summed in double over fixed pixel chunks, so the result does not depend on
//              the number of threads)
//   y[n, h, w, c] = (x - mean)·(gamma[c] / sqrt(var + eps)) + beta[c], then SiLU if asked,
// stored as f32 or rounded to bf16 (the input type of the convolution it feeds):
//
//   GroupNormSpec s;  s.channels = 128;  s.height = s.width = 256;  s.silu = true;  s.out = DType::BF16;
//   group_norm(s, x, y, gamma, beta);   // x [1, 256, 256, 128] f32 -> y [1, 256, 256, 128] bf16
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/dtype.h"

namespace dit {

class RowSplit;

struct GroupNormSpec {
  int64_t batch = 1, channels = 0, height = 0, width = 0, groups = 32;
  float eps = 1e-6f;
  bool silu = false;       // apply SiLU after the affine transform
  DType out = DType::F32;  // y's type (BF16: rounded to nearest even)
  // x is one band of `height` rows of a larger image split over processes: the group sums are
  // added over the bands (the statistics are the whole image's), and the pixel count is
  // image_height · width. Null: x is the whole image.
  RowSplit* split = nullptr;
  int64_t image_height = 0;  // with a split: the whole image's rows
};

// x: [batch, height, width, channels] f32 (with a split, batch 1); y: the same shape in s.out. gamma/beta: [channels]
// or null (1 and 0). x == y is allowed for f32 output.
void group_norm(const GroupNormSpec& s, const float* x, void* y, const float* gamma, const float* beta);

// group_norm in two halves, for a consumer that normalises x piece by piece as it reads it (the
// VAE decoder's Winograd convolutions, runtime/conv2d.h run_rows) instead of into a whole
// buffer: the same bits as group_norm's f32 output.
//
//   GroupNormAffine f;
//   group_norm_stats(s, x, gamma, beta, f);              // one image (batch 1): mean, scale, shift per channel
//   group_norm_apply(s, f, x + p * C, piece, pixels);    // y = SiLU?((x - mean)·a + b) for `pixels` pixels
struct GroupNormAffine {
  std::vector<float> mean, a, b;  // [channels]: y = (x - mean)·a + b
};
void group_norm_stats(const GroupNormSpec& s, const float* x, const float* gamma, const float* beta, GroupNormAffine& f);
void group_norm_apply(const GroupNormSpec& s, const GroupNormAffine& f, const float* x, float* y, int64_t pixels);

}  // namespace dit
