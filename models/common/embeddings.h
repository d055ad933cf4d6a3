// The fixed (weight-free) parts of DiT's input and output: sinusoidal timestep features,
// 2-D sin-cos positions, and the patch (un)folding between latents and tokens.
// Token n of an h×w patch grid is row i = n / w, column j = n % w.
#pragma once

#include <cstdint>
#include <vector>

namespace dit {

// diffusers get_timestep_embedding(t, dim, flip_sin_to_cos=true, downscale_freq_shift=shift),
// in float32 like torch: out[dim] = [cos(t·f_k)]_{k<dim/2} ++ [sin(t·f_k)]_{k<dim/2},
// f_k = exp(-ln(10000)·k / (dim/2 - shift)).
void timestep_embedding(double t, int dim, float shift, float* out);

// diffusers get_2d_sincos_pos_embed for an h×w grid with base_size and interpolation
// scale, rows [token_begin, token_end) only: out is [(token_end - token_begin), dim].
// The first half of each row encodes the column, the second half the row.
void pos_embed_2d(int dim, int64_t grid_h, int64_t grid_w, double base_size, double interpolation_scale,
                  int64_t token_begin, int64_t token_end, float* out);

// Flattens the p×p patches of tokens [token_begin, token_end) of x [batch, C, H, W] into
// rows [batch, tokens, C·p·p] ordered (c, ki, kj) — the layout of a Conv2d weight [D, C, p, p],
// so patch embedding is a linear layer with that weight reshaped to [D, C·p·p].
void patchify(const float* x, int64_t batch, int64_t channels, int64_t height, int64_t width, int64_t patch,
              int64_t token_begin, int64_t token_end, float* out);

// Inverse for the model output: tokens [batch, h·w, p·p·C_out] laid out (pi, pj, c) ->
// latents [batch, keep_channels, h·p, w·p] keeping channels c < keep_channels.
void unpatchify(const float* tokens, int64_t batch, int64_t grid_h, int64_t grid_w, int64_t patch,
                int64_t out_channels, int64_t keep_channels, float* out);

}  // namespace dit
