// DiT forward pass (diffusers DiTTransformer2DModel, FORMATS.md §1.6) over the tokens this
// process holds. Attention goes through the SelfAttention interface, so the same code runs
// serially or with its sequence split across ranks (Ulysses, Ring).
//
//   DiTTransformer dit(weights);                         // weights loaded once
//   dit.prepare({.batch = 2, .grid_h = 16, .grid_w = 16, .token_begin = 0, .token_end = 256}, attn);
//   dit.forward(latents, t, y, out);                     // many times, allocation-free
//
// latents: [batch, C, H, W] (the full latents: every rank holds them), t: [batch] timesteps,
// y: [batch] class ids (num_classes = null/unconditional); out: [batch, local_tokens, p·p·C_out].
#pragma once

#include <cstdint>
#include <vector>

#include "models/dit_weights.h"
#include "runtime/linear.h"
#include "runtime/norm.h"
#include "runtime/self_attention.h"

namespace dit {

struct DiTShape {
  int64_t batch = 1;
  int64_t grid_h = 0, grid_w = 0;          // patch grid: latent size / patch
  int64_t token_begin = 0, token_end = 0;  // this process's tokens of the grid_h·grid_w sequence
  int64_t tokens() const { return grid_h * grid_w; }
  int64_t local_tokens() const { return token_end - token_begin; }
};

class DiTTransformer {
 public:
  explicit DiTTransformer(const DiTWeights& w) : w_(w) {}
  // Creates every primitive and buffer for this shape; `attn` must outlive the forward calls.
  void prepare(const DiTShape& shape, SelfAttention* attn);
  void forward(const float* latents, const double* t, const int64_t* y, float* out);
  const DiTShape& shape() const { return shape_; }

 private:
  void conditioning(const DiTBlockWeights& bw, size_t block, const double* t, const int64_t* y);

  const DiTWeights& w_;
  DiTShape shape_;
  SelfAttention* attn_ = nullptr;

  // Primitives (created in prepare).
  Linear patch_;
  struct BlockOps {
    Linear t_fc1, t_fc2, ada, qkv, attn_out, fc1, fc2;
    Linear q, k, v;  // unfused Q, K, V (weights not concatenated): column blocks of qkv_
    bool split_qkv = false;
  };
  std::vector<BlockOps> ops_;
  Linear final_ada_, final_out_;
  LayerNormModulate ln_attn_, ln_mlp_;

  // Activations (allocated in prepare).
  Tensor patches_;   // [B, T, C·p·p]
  Tensor pos_;       // [T, D] positions of the local tokens
  Tensor x_;         // [B, T, D] residual stream
  Tensor h_;         // [B, T, D] normalised + modulated
  Tensor qkv_;       // [B, T, 3D]
  Tensor attn_out_;  // [B, T, D]
  Tensor mlp_;       // [B, T, 4D]
  Tensor tfreq_;     // [B, 256]
  Tensor temb_;      // [B, D]
  Tensor cond_;      // [B, D]  c = t_emb + class_emb, then SiLU(c)
  Tensor mod_;       // [B, 6D] adaLN output
  Tensor chunks_;    // [6, B, D] the six modulation vectors, each [B, D] contiguous
  Tensor final_mod_; // [B, 2D]
  Tensor final_chunks_;  // [2, B, D]
};

}  // namespace dit
