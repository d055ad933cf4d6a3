// DiT forward pass (diffusers DiTTransformer2DModel, docs/models.md "DiT") over the tokens
// this process holds, as a DiffusionModel (models/diffusion_model.h). Attention goes through
// the SelfAttention role, so the same code runs serially or with its sequence split across
// ranks (Ulysses, Ring).
//
//   auto tp = ctx->layers().tensor_parallel(TpScope::Transformer);    // which weight shards are ours
//   DiTTransformer dit(DiTWeights::load(cfg, store, DType::F32, QkvProjection::Auto, *tp), std::move(tp));
//   ModelShape shape;  shape.batch = 2;  shape.latent_h = shape.latent_w = 32;
//   dit.prepare(shape, *ctx);                // primitives, buffers, attention (ctx: runtime/parallel_context.h)
//   dit.begin(cond);                         // cond.class_ids [batch] (num_classes = null/unconditional),
//                                            // cond.schedule: the timesteps to come (conditioning computed ahead)
//   dit.forward(latents, t, out);            // many times, allocation-free
//
// latents: [batch, C, H, W] (the full latents: every rank holds them), t: [batch] timesteps;
// out: [batch, output tokens, p·p·C_out] (SequenceSplit::output_range).
//
// Under tensor parallelism this rank holds its heads' Q/K/V and its MLP columns; the row-
// parallel out projections reduce over the TP ranks; with Megatron sequence parallelism the
// residual stream x holds only this rank's share of the tokens (tp->residual()) and
// tp->gather() brings the normalised tokens together before the column-parallel linears.
#pragma once

#include <cstdint>
#include <vector>

#include "models/common/image_tokens.h"
#include "models/diffusion_model.h"
#include "models/dit/dit_conditioning.h"
#include "models/dit/dit_weights.h"
#include "runtime/feed_forward.h"
#include "runtime/linear.h"
#include "runtime/norm.h"

namespace dit {

class DiTTransformer final : public DiffusionModel {
 public:
  DiTTransformer(DiTWeights w, std::unique_ptr<TensorParallel> tp);
  const ModelGeometry& geometry() const override { return geo_; }
  void prepare(const ModelShape& shape, ParallelContext& ctx) override;
  void begin(const Conditioning& cond) override;
  void forward(const float* latents, const double* t, float* out) override;
  ModelFlops flops() const override;
  const DiTWeights& weights() const { return w_; }

 private:
  void block(size_t l, float* x);
  void final_layer(float* out);

  DiTWeights w_;
  std::unique_ptr<TensorParallel> tp_;
  ModelGeometry geo_;
  int64_t B_ = 0;     // prepared batch
  ImageTokens img_;  // the patch grid, this rank's attention tokens, residual rows and output rows
  std::unique_ptr<SelfAttention> attn_;
  DiTConditioning cond_;                      // c and the adaLN modulation, a window of steps at a time

  // Primitives (created in prepare).
  Linear patch_;
  struct BlockOps {
    std::unique_ptr<ParallelLinear> attn_out;
    std::unique_ptr<FeedForward> ffn;  // fc1, GELU, fc2 (runtime/feed_forward.h)
    std::unique_ptr<Projection> qkv;  // Q, K, V (models/common/qkv.h)
  };
  std::vector<BlockOps> ops_;
  Linear final_out_;
  LayerNormModulate ln_attn_, ln_mlp_, ln_final_;

  // Activations (allocated in prepare). T attention tokens, R residual rows, O output rows;
  // D' = this rank's heads × head_dim, M' = its MLP columns (D and 4D with one rank).
  Tensor patches_;   // [B, R, C·p·p]
  Tensor pos_;       // [R, D] positions of the residual rows
  Tensor x_;         // [B, R, D] residual stream
  Tensor h_;         // [B, R, D] normalised + modulated, f32 (the final layer)
  Tensor hn_;        // [B, R, D] the same in the blocks, in block_input_dtype (bf16 with bf16 compute)
  Tensor hout_;      // [B, O, D] the output rows of h_ (when O < R)
  Tensor qkv_;       // [B, T, 3D']
  Tensor attn_out_;  // [B, T, D']
  Tensor mlp_;       // [B, T, M']
};

}  // namespace dit
