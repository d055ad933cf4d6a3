#include "models/dit/dit_transformer.h"

#include "models/common/block_input.h"
#include "models/common/embeddings.h"
#include "models/common/feed_forward.h"
#include "models/common/patch_grid.h"
#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

DiTTransformer::DiTTransformer(DiTWeights w, std::unique_ptr<TensorParallel> tp)
    : w_(std::move(w)), tp_(std::move(tp)), geo_(geometry_of(w_.cfg)) {}

void DiTTransformer::prepare(const ModelShape& s, ParallelContext& ctx) {
  const DiTConfig& c = w_.cfg;
  check_latent_grid("DiT", s, c.patch);
  B_ = s.batch;
  img_ = image_tokens(s, c.patch, ctx, *tp_, c.hidden());
  if (!attn_) attn_ = ctx.layers().self_attention();  // once: it may hold communication state
  const int64_t B = B_, N = img_.all(), T = img_.tokens.size(), D = c.hidden();
  const int64_t R = img_.res.size(), O = img_.out.size();
  const DiTBlockWeights& b0 = w_.blocks[0];
  const int64_t Dl = b0.qkv.out(), Ml = b0.fc1.w.out(), Hl = Dl / c.head_dim;

  const DType hidden = ffn_hidden_dtype(w_.compute);  // models/common/feed_forward.h
  const DType normed = block_input_dtype(w_.compute);  // models/common/block_input.h

  attn_->prepare(SelfAttentionShape{B, T, N, Hl, c.head_dim, w_.compute});  // batch, tokens here, all, heads, d
  const DType qkv_type = attn_->qkv_dtype();  // bf16 where the attention reads bf16 q, k, v
  const DType attn_type = attn_->out_dtype();  // bf16 where it writes bf16 (local attention)

  mlp_ = Tensor::empty({B, T, Ml}, hidden);
  ops_.clear();
  if (R > 0) patch_ = make_linear(w_.patch, B * R);
  for (const DiTBlockWeights& bw : w_.blocks) {
    BlockOps o;
    o.qkv = make_block_qkv(ctx.layers(), bw.qkv, B, T, D, qkv_type, normed);  // every rank
    if (T > 0) {
      o.attn_out = block_linear(*tp_, bw.attn_out, {B, T, D, D, /*gated=*/true, false, attn_type});
    }
    o.ffn = make_block_feed_forward(ctx.layers(), *tp_, bw.fc1.w, bw.fc2, B, T, D, w_.compute, mlp_);  // every rank
    ops_.push_back(std::move(o));
  }
  cond_.prepare(w_, B, *tp_);
  if (R > 0) {
    ln_attn_ = LayerNormModulate(B, R, D, 1e-6f);
    ln_mlp_ = LayerNormModulate(B, R, D, c.norm_eps);
  }
  if (O > 0) final_out_ = make_linear(w_.final_out, B * O);

  patches_ = Tensor::empty({B, R, int64_t(c.patch_dim_in())});
  pos_ = Tensor::empty({R, D});
  x_ = Tensor::empty({B, R, D});
  h_ = Tensor::empty({B, R, D});  // the final layer's norm
  hn_ = normed == DType::F32 ? h_ : Tensor::empty({B, R, D}, normed);  // (f32: the same buffer, used in turn)
  hout_ = O < R ? Tensor::empty({B, O, D}) : Tensor();
  qkv_ = Tensor::empty({B, T, 3 * Dl}, qkv_type);
  attn_out_ = Tensor::empty({B, T, Dl}, attn_type);

  pos_embed_2d(int(D), img_.grid_h, img_.grid_w, double(c.sample_size / c.patch), c.interpolation_scale,
               img_.res.begin, img_.res.end, pos_.f32());
}

void DiTTransformer::begin(const Conditioning& cond) {
  DIT_CHECK(int64_t(cond.class_ids.size()) == B_, "DiT: " << cond.class_ids.size() << " class ids for a batch of " << B_);
  for (const int64_t y : cond.class_ids)
    DIT_CHECK(y >= 0 && y <= w_.cfg.num_classes, "DiT: class id " << y << " out of range 0.." << w_.cfg.num_classes);
  cond_.begin(cond.class_ids, cond.schedule);
}

// One block on the residual rows x [B, R, D]:
//   x += gate_msa ⊙ Attn(LN(x)(1 + scale_msa) + shift_msa);  x += gate_mlp ⊙ FF(LN(x)(1 + scale_mlp) + shift_mlp)
void DiTTransformer::block(size_t l, float* x) {
  const int64_t R = img_.res.size(), T = img_.tokens.size();
  const BlockOps& o = ops_[l];
  auto chunk = [&](int k) { return cond_.block_chunk(l, k); };  // [B, D] each (DiTConditioning)
  // 0 shift_msa, 1 scale_msa, 2 gate_msa, 3 shift_mlp, 4 scale_mlp, 5 gate_mlp
  // h = LN(x)(1 + scale_msa) + shift_msa on the residual rows, gathered to [B, T, D]
  const BlockInput h = modulated_norm(*tp_, ln_attn_, x, hn_, chunk(0), chunk(1), R > 0);
  project_and_attend(*o.qkv, *attn_, h, qkv_, attn_out_);  // [B, T, 3, H', d] -> [B, T, H', d]
  if (T > 0) attention_output(*o.attn_out, attn_out_, x, chunk(2));  // x += gate_msa ⊙ (Σ attn·Wo + bo)
  // h = LN(x)(1 + scale_mlp) + shift_mlp, gathered
  const BlockInput hm = modulated_norm(*tp_, ln_mlp_, x, hn_, chunk(3), chunk(4), R > 0);
  run_feed_forward(*o.ffn, hm, x, chunk(5));  // x += gate_mlp ⊙ FF(h)   (hidden [B, T, M'])
}

// shift, scale = proj_out_1(SiLU(c_0)) (DiTConditioning), out = proj_out_2(LN(x)·(1+scale)+shift)
// on this rank's output rows.
void DiTTransformer::final_layer(float* out) {
  const int64_t B = B_, D = w_.cfg.hidden(), R = img_.res.size(), O = img_.out.size();
  if (O == 0) return;
  ln_attn_.run(x_.f32(), h_.f32(), cond_.final_chunk(0), cond_.final_chunk(1));
  const float* h = h_.f32();
  if (O < R) {  // tensor parallel without Megatron SP: this rank outputs a share of the rows
    copy_rows(h_.f32(), B, R, img_.out.begin - img_.res.begin, O, D, hout_.f32());
    h = hout_.f32();
  }
  final_out_.run(h, out);  // [B, O, p·p·C_out]
}

void DiTTransformer::forward(const float* latents, const double* t, float* out) {
  const DiTConfig& c = w_.cfg;
  const int64_t B = B_, R = img_.res.size(), D = c.hidden();
  float* x = x_.f32();
  // Profiler (off unless enabled): what the scopes below do not claim is norm/elementwise.
  profile::Scope prof(profile::Cat::NormElementwise);

  // Patch embedding of the residual rows + fixed positions: x = patches·Wᵀ + b + pos   [B, R, D]
  if (R > 0) {
    patchify(latents, B, c.in_channels, img_.grid_h * c.patch, img_.grid_w * c.patch, c.patch, img_.res.begin,
             img_.res.end, patches_.f32());
    patch_.run(patches_.f32(), x);
    for (int64_t b = 0; b < B; ++b) add(x + b * R * D, pos_.f32(), x + b * R * D, R * D);
  }
  cond_.select(t);  // the modulation of every block at t (computed once per window of steps)
  for (size_t l = 0; l < w_.blocks.size(); ++l) block(l, x);
  final_layer(out);
}

ModelFlops DiTTransformer::flops() const {
  const DiTConfig& c = w_.cfg;
  const double B = double(B_), N = double(img_.all()), D = c.hidden(), L = c.layers;
  ModelFlops f;
  f.linear = L * 2 * B * N * D * (3 * D + D + 4 * D + 4 * D) + 2 * B * N * D * (c.patch_dim_in() + c.patch_dim_out());
  f.attention = L * 4 * B * N * N * D;
  // timestep MLP + adaLN per block, and once more for the final layer (+ its 2D modulation).
  f.conditioning = (L + 1) * 2 * B * (256 * D + D * D) + L * 2 * B * D * 6 * D + 2 * B * D * 2 * D;
  return f;
}

}  // namespace dit
