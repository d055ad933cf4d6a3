// Row sources for Conv2d::run_rows (runtime/conv2d.h): a band's input rows made as each of the
// convolution's pieces needs them, so that the transform of x feeding a convolution never fills
// a buffer of the whole image (the VAE decoder's GroupNorm + SiLU before each of its resnets'
// convolutions, and its nearest-2x upsamplings).
//
//   GroupNormAffine f;  group_norm_stats(gn, x_rows, gamma, beta, f);
//   conv.run_rows(GroupNormRows(gn, f, x, top_edge, bottom_edge), y);     // y = conv(SiLU(GN(x)))
//   conv.run_rows(UpsampledRows(x, rows, w, c, top_edge, bottom_edge), y); // y = conv(nearest2x(x))
//
// x is a band in the halo form (runtime/row_split.h): [rows + 2, W, C] f32, its halo rows
// exchanged with the neighbours' first. A halo row at the image's top or bottom edge comes out as
// zeros (the convolution's padding), whatever x holds there. The values are group_norm's and
// upsample_nearest2x's f32 outputs, bit for bit.
#pragma once

#include <cstdint>

#include "runtime/conv2d.h"
#include "runtime/group_norm.h"

namespace dit {

// SiLU?(GroupNorm(x)) with f's statistics (s: the band, height = its rows, width, channels, silu).
class GroupNormRows final : public RowSource {
 public:
  GroupNormRows(const GroupNormSpec& s, const GroupNormAffine& f, const float* x, bool top_edge, bool bottom_edge)
      : s_(s), f_(f), x_(x), top_(top_edge), bottom_(bottom_edge) {}
  void rows(int64_t first, int64_t count, float* out) const override;

 private:
  const GroupNormSpec& s_;
  const GroupNormAffine& f_;
  const float* x_;
  bool top_, bottom_;
};

// nearest2x(x) of a band of `rows` rows of width w: 2·rows rows of width 2w (and their halo rows).
class UpsampledRows final : public RowSource {
 public:
  UpsampledRows(const float* x, int64_t rows, int64_t w, int64_t c, bool top_edge, bool bottom_edge)
      : x_(x), rows_(rows), w_(w), c_(c), top_(top_edge), bottom_(bottom_edge) {}
  void rows(int64_t first, int64_t count, float* out) const override;

 private:
  const float* x_;
  int64_t rows_, w_, c_;
  bool top_, bottom_;
};

}  // namespace dit
