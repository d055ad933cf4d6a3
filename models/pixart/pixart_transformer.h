// PixArt-α/Σ forward pass (diffusers PixArtTransformer2DModel, docs/pixart.md) over the image
// tokens this process holds, as a DiffusionModel (models/diffusion_model.h):
//
//   x = patch_embed(latents) + pos                                   [B, T, D]
//   e = t_embed(t) (+ [res_embed(h), res_embed(w), ar_embed(h/w)])   [B, D]  (embedded timestep)
//   t6 = ada(SiLU(e))                                                [B, 6D]
//   y = caption2(GELU-tanh(caption1(T5 states)))                     [B, L, D] (once per request)
//   per block (shift/scale/gate = scale_shift_table + t6):
//     x += gate_msa ⊙ SelfAttn(LN(x)(1 + scale_msa) + shift_msa)
//     x += CrossAttn(q = x, k, v = y; key bias (1 - mask)·(-10000))     (no norm, no gate;
//          keys past the batch's last unmasked text token are skipped: they weigh nothing)
//     x += gate_mlp ⊙ FF(LN(x)(1 + scale_mlp) + shift_mlp)
//   out = proj_out(LN(x)(1 + scale) + shift), shift/scale = final scale_shift_table + e
//
// Self-attention goes through the SelfAttention role (local, Ulysses, Ring); the cross-
// attention's keys and values (the projected caption, the same on every rank) are computed
// once per request in begin(), and each rank's queries attend to them locally. Under tensor
// parallelism a rank holds its heads of both attentions and its MLP columns (pixart_tp_plan);
// with Megatron sequence parallelism the residual stream holds its share of the tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/common/image_tokens.h"
#include "models/diffusion_model.h"
#include "models/pixart/pixart_weights.h"
#include "runtime/feed_forward.h"
#include "runtime/linear.h"
#include "runtime/norm.h"

namespace dit {

// The text tokens the cross-attention reads, of a [batch, L] mask: up to the last one any item
// does not mask (mask 0). The padding past it carries the bias -10000 on every item, so its
// weight exp(s - 10000 - max) is 0 in f32 (unless a padding key's logit exceeded every real
// key's by some 9900, which no trained model gives): skipping it changes no value. An item whose
// mask is all 0 attends to every token (equal logits: the average of all, as diffusers gives it).
int64_t attended_text_tokens(const float* mask, int64_t batch, int64_t L);

class PixArtTransformer final : public DiffusionModel {
 public:
  PixArtTransformer(PixArtWeights w, std::unique_ptr<TensorParallel> tp);
  const ModelGeometry& geometry() const override { return geo_; }
  void prepare(const ModelShape& shape, ParallelContext& ctx) override;
  void begin(const Conditioning& cond) override;
  void forward(const float* latents, const double* t, float* out) override;
  ModelFlops flops() const override;
  const PixArtWeights& weights() const { return w_; }

 private:
  void make_linears(LayerContext& layers);  // prepare()'s steps
  void allocate();
  void embed_timestep(const double* t);
  void self_attention(size_t l, float* x);
  void cross_attention(size_t l, float* x);

  PixArtWeights w_;
  std::unique_ptr<TensorParallel> tp_;
  ModelGeometry geo_;
  int64_t B_ = 0, L_ = 0;  // prepared batch and text length
  int64_t kv_used_ = 0;    // the text tokens the cross-attention reads, per request (begin: ≤ L_)
  ImageTokens img_;        // the patch grid, this rank's attention tokens, residual rows and output rows
  std::unique_ptr<SelfAttention> attn_;
  std::unique_ptr<CrossAttention> cross_;

  // Primitives (created in prepare).
  Linear patch_, t_fc1_, t_fc2_, res_fc1_, res_fc2_, ar_fc1_, ar_fc2_, ada_, caption1_, caption2_, proj_out_;
  struct BlockOps {
    std::unique_ptr<Projection> qkv;  // Q, K, V (models/common/qkv.h)
    Linear q2, k2, v2;
    std::unique_ptr<ParallelLinear> attn1_out, attn2_out;
    std::unique_ptr<FeedForward> ffn;  // fc1, GELU, fc2 (runtime/feed_forward.h)
  };
  std::vector<BlockOps> ops_;
  LayerNormModulate ln_, ln_final_;

  // Per request (begin).
  Tensor micro_;     // [B, D] resolution/aspect-ratio embeddings (α), added to the timestep embedding
  Tensor key_bias_;  // [B, L] (1 - mask)·(-10000)
  Tensor caption_;   // [B, L, D] projected caption (scratch)
  Tensor caption_h_; // [B, L, D] GELU(linear_1) (scratch)
  std::vector<Tensor> k2_, v2_;  // per block [B, L, D'], in the cross-attention's io_dtype

  // Activations (allocated in prepare): x_, h_ [B, R, D] residual rows (h_ the final layer's
  // norm; hn_ the blocks', in block_input_dtype); qkv_ [B, T, 3D'], self_out_ (in the self-
  // attention's out_dtype), q2_ and cross_out_ [B, T, D'] (in the cross-attention's io_dtype,
  // as k2_ and v2_), mlp_ [B, T, M'] (D', M': this rank's heads × d and MLP columns).
  Tensor patches_, pos_, x_, h_, hn_, hout_, qkv_, self_out_, cross_out_, q2_, mlp_;
  Tensor tfreq_, temb_, emb_, t6_, chunks_, final_chunks_;
};

}  // namespace dit
