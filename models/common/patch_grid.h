// The image side every DiT-family transformer (DiT, PixArt, and SD3/Flux next) shares: the
// geometry it reports, the latent grid it accepts, the plain linears over token rows, and
// the copy of a tensor-parallel rank's share of output rows.
#pragma once

#include <cstdint>
#include <cstring>

#include "models/diffusion_model.h"
#include "runtime/error.h"
#include "runtime/linear.h"

namespace dit {

// The geometry of a config with in/out channels, patch, sample size, heads, hidden() and layers.
template <class Config>
ModelGeometry geometry_of(const Config& c) {
  ModelGeometry g;
  g.in_channels = c.in_channels;
  g.out_channels = c.out_channels;
  g.patch = c.patch;
  g.sample_size = c.sample_size;
  g.heads = c.heads;
  g.hidden = c.hidden();
  g.layers = c.layers;
  return g;
}

// Latents [B, C, h, w] must be a positive multiple of the patch size (throws naming the family).
inline void check_latent_grid(const char* family, const ModelShape& s, int64_t patch) {
  DIT_CHECK(s.batch >= 1 && s.latent_h >= patch && s.latent_w >= patch && s.latent_h % patch == 0 &&
                s.latent_w % patch == 0,
            family << ": latents " << s.latent_h << "x" << s.latent_w
                   << " are not a positive multiple of the patch size " << patch);
}

// A plain (not split) linear over `rows` token rows: y = act(x·Wᵀ + b), x in `input` and y in
// `output` (f32, or bf16 with bf16 compute).
inline Linear make_linear(const LinearWeight& lw, int64_t rows, Act act = Act::None, DType output = DType::F32,
                          DType input = DType::F32) {
  LinearSpec spec;
  spec.batch = 1;
  spec.rows = rows;
  spec.in = lw.in();
  spec.out = lw.out();
  spec.act = act;
  spec.output = output;
  spec.input = input;
  return Linear(spec, lw);
}

// Rows [off, off + n) of each batch element of x [B, R, D] -> y [B, n, D].
inline void copy_rows(const float* x, int64_t batch, int64_t rows, int64_t off, int64_t n, int64_t dim, float* y) {
  for (int64_t b = 0; b < batch; ++b) std::memcpy(y + b * n * dim, x + (b * rows + off) * dim, size_t(n * dim) * 4);
}

}  // namespace dit
