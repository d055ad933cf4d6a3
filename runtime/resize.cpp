#include "runtime/resize.h"

#include <algorithm>
#include <vector>

#include "runtime/error.h"

namespace dit {

namespace {

// For each output index: the two source indices and their weights (torch's
// area_pixel_compute_source_index with align_corners=False, in float).
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

Taps taps(int64_t in, int64_t out) {
  Taps t;
  const float scale = float(in) / float(out);
  for (int64_t o = 0; o < out; ++o) {
    float src = scale * (float(o) + 0.5f) - 0.5f;
    if (src < 0.f) src = 0.f;
    const int64_t i0 = std::min(int64_t(src), in - 1);
    const int64_t i1 = std::min(i0 + 1, in - 1);
    const float l1 = src - float(i0);
    t.i0.push_back(i0);
    t.i1.push_back(i1);
    t.w0.push_back(1.f - l1);
    t.w1.push_back(l1);
  }
  return t;
}

}  // namespace

void resize_bilinear(const float* x, int64_t planes, int64_t h, int64_t w, float* y, int64_t oh, int64_t ow) {
  DIT_CHECK(planes >= 0 && h > 0 && w > 0 && oh > 0 && ow > 0,
            "resize_bilinear: bad sizes " << h << "x" << w << " -> " << oh << "x" << ow);
  const Taps th = taps(h, oh), tw = taps(w, ow);
  for (int64_t p = 0; p < planes; ++p) {
    const float* xp = x + p * h * w;
    float* yp = y + p * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      const float* r0 = xp + th.i0[size_t(i)] * w;
      const float* r1 = xp + th.i1[size_t(i)] * w;
      const float a0 = th.w0[size_t(i)], a1 = th.w1[size_t(i)];
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t j0 = tw.i0[size_t(j)], j1 = tw.i1[size_t(j)];
        const float b0 = tw.w0[size_t(j)], b1 = tw.w1[size_t(j)];
        yp[i * ow + j] = a0 * (b0 * r0[j0] + b1 * r0[j1]) + a1 * (b0 * r1[j0] + b1 * r1[j1]);
      }
    }
  }
}

void resize_and_center_crop(const float* x, int64_t planes, int64_t h, int64_t w, float* y, int64_t oh, int64_t ow) {
  if (h == oh && w == ow) {
    std::copy(x, x + planes * h * w, y);
    return;
  }
  const double ratio = std::max(double(oh) / double(h), double(ow) / double(w));
  const int64_t rh = int64_t(double(h) * ratio), rw = int64_t(double(w) * ratio);
  DIT_CHECK(rh >= oh && rw >= ow, "resize_and_center_crop: " << h << "x" << w << " scaled to " << rh << "x" << rw
                                                             << " cannot be cropped to " << oh << "x" << ow);
  std::vector<float> tmp(size_t(planes * rh * rw));
  resize_bilinear(x, planes, h, w, tmp.data(), rh, rw);
  const int64_t top = (rh - oh) / 2, left = (rw - ow) / 2;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < oh; ++i)
      std::copy_n(tmp.data() + (p * rh + top + i) * rw + left, ow, y + (p * oh + i) * ow);
}

}  // namespace dit
