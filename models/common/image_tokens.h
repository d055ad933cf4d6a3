// Which image tokens a rank holds, and which rows it computes on, for a latent grid under a
// parallel context: the first step of every DiT-family transformer's prepare() (DiT, PixArt;
// SD3/Flux next).
//
//   ImageTokens it = image_tokens(shape, c.patch, ctx, *tp, c.hidden());
//   attn->prepare(SelfAttentionShape{B, it.tokens.size(), it.all(), heads, d, compute});
#pragma once

#include <cstdint>

#include "models/diffusion_model.h"
#include "runtime/parallel_context.h"
#include "runtime/tensor_parallel.h"
#include "runtime/token_split.h"

namespace dit {

struct ImageTokens {
  int64_t grid_h = 0, grid_w = 0;  // the patch grid
  TokenRange tokens;  // the tokens whose attention and linears this rank computes (its sequence share)
  TokenRange res;     // its residual rows (⊆ tokens: a share of them under Megatron sequence parallelism)
  TokenRange out;     // the rows whose output it computes (⊆ res)
  int64_t all() const { return grid_h * grid_w; }
};

// The grid of shape's latents in patches of `patch`, this rank's share of its tokens
// (ctx.sequence()), and tensor parallelism prepared for them (tp.prepare: batch items, the
// tokens, `hidden` features), which decides the residual rows. Throws when the output rows
// are not among the residual rows.
ImageTokens image_tokens(const ModelShape& shape, int64_t patch, ParallelContext& ctx, TensorParallel& tp,
                         int64_t hidden);

}  // namespace dit
