#include "models/common/embeddings.h"

#include <cmath>

namespace dit {

void timestep_embedding(double t, int dim, float shift, float* out) {
  const int half = dim / 2;
  const float tf = float(t);
  const float neg_log = float(-std::log(10000.0));
  for (int k = 0; k < half; ++k) {
    const float exponent = (neg_log * float(k)) / (float(half) - shift);
    const float arg = tf * std::exp(exponent);
    out[k] = std::cos(arg);         // flip_sin_to_cos: cos half first
    out[half + k] = std::sin(arg);
  }
  if (dim % 2) out[dim - 1] = 0.0f;  // diffusers zero-pads odd dims
}

namespace {

// get_1d_sincos_pos_embed_from_grid for one position: [sin(pos·ω_k)] ++ [cos(pos·ω_k)], float64.
void sincos_1d(int dim, double pos, float* out) {
  const int half = dim / 2;
  for (int k = 0; k < half; ++k) {
    const double omega = 1.0 / std::pow(10000.0, double(k) / (dim / 2.0));
    out[k] = float(std::sin(pos * omega));
    out[half + k] = float(std::cos(pos * omega));
  }
}

}  // namespace

void pos_embed_2d(int dim, int64_t grid_h, int64_t grid_w, double base_size, double interpolation_scale,
                  int64_t token_begin, int64_t token_end, float* out) {
  // numpy float32: arange(n, float32) / (n / base_size) / interpolation_scale
  const float scale_h = float(double(grid_h) / base_size), scale_w = float(double(grid_w) / base_size);
  const float interp = float(interpolation_scale);
  for (int64_t n = token_begin; n < token_end; ++n) {
    const int64_t i = n / grid_w, j = n % grid_w;
    const float gw = float(j) / scale_w / interp;
    const float gh = float(i) / scale_h / interp;
    float* row = out + (n - token_begin) * dim;
    sincos_1d(dim / 2, double(gw), row);            // column first
    sincos_1d(dim / 2, double(gh), row + dim / 2);  // then row
  }
}

void patchify(const float* x, int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t patch,
              int64_t token_begin, int64_t token_end, float* out) {
  const int64_t grid_w = width / patch;
  const int64_t row = channels * patch * patch;
  const int64_t tokens = token_end - token_begin;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t n = token_begin; n < token_end; ++n) {
      const int64_t i = n / grid_w, j = n % grid_w;
      float* o = out + (b * tokens + (n - token_begin)) * row;
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t ki = 0; ki < patch; ++ki) {
          const float* src = x + ((b * channels + c) * height + i * patch + ki) * width + j * patch;
          for (int64_t kj = 0; kj < patch; ++kj) *o++ = src[kj];
        }
    }
}

void unpatchify(const float* tokens, int64_t batch, int64_t grid_h, int64_t grid_w, int64_t patch,
                int64_t out_channels, int64_t keep_channels, float* out) {
  const int64_t H = grid_h * patch, W = grid_w * patch;
  const int64_t row = patch * patch * out_channels;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < grid_h; ++i)
      for (int64_t j = 0; j < grid_w; ++j) {
        const float* t = tokens + (b * grid_h * grid_w + i * grid_w + j) * row;
        for (int64_t pi = 0; pi < patch; ++pi)
          for (int64_t pj = 0; pj < patch; ++pj)
            for (int64_t c = 0; c < keep_channels; ++c)
              out[((b * keep_channels + c) * H + i * patch + pi) * W + j * patch + pj] =
                  t[(pi * patch + pj) * out_channels + c];
      }
}

}  // namespace dit
