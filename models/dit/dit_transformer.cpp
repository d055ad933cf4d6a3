#include "models/dit/dit_transformer.h"

#include <cstring>

#include "models/common/embeddings.h"
#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

// [B, n·D] rows -> [n, B, D] (chunk k of batch b at out[(k·B + b)·D]).
void split_chunks(const float* m, int64_t batch, int64_t n, int64_t dim, float* out) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t k = 0; k < n; ++k) std::memcpy(out + (k * batch + b) * dim, m + (b * n + k) * dim, dim * 4);
}

}  // namespace

DiTTransformer::DiTTransformer(DiTWeights w) : w_(std::move(w)) {
  const DiTConfig& c = w_.cfg;
  geo_.in_channels = c.in_channels;
  geo_.out_channels = c.out_channels;
  geo_.patch = c.patch;
  geo_.sample_size = c.sample_size;
  geo_.heads = c.heads;
  geo_.hidden = c.hidden();
  geo_.layers = c.layers;
}

void DiTTransformer::prepare(const ModelShape& s, ParallelContext& ctx) {
  const DiTConfig& c = w_.cfg;
  DIT_CHECK(s.batch >= 1 && s.latent_h >= c.patch && s.latent_w >= c.patch && s.latent_h % c.patch == 0 &&
                s.latent_w % c.patch == 0,
            "DiT: latents " << s.latent_h << "x" << s.latent_w << " are not a positive multiple of the patch size "
                            << c.patch);
  B_ = s.batch;
  grid_h_ = s.latent_h / c.patch;
  grid_w_ = s.latent_w / c.patch;
  tokens_ = ctx.sequence().range(grid_h_ * grid_w_);
  if (!attn_) attn_ = ctx.layers().self_attention();  // once: it may hold communication state
  y_.assign(size_t(B_), 0);
  const int64_t B = B_, T = tokens_.size(), D = c.hidden();

  auto lin = [&](const LinearWeight& lw, int64_t batch, int64_t rows, Act act, bool gated, int64_t out_stride = 0) {
    LinearSpec spec;
    spec.batch = batch;
    spec.rows = rows;
    spec.in = lw.in();
    spec.out = lw.out();
    spec.act = act;
    spec.gated_residual = gated;
    spec.out_stride = out_stride;
    return Linear(spec, lw);
  };

  ops_.clear();
  if (T > 0) patch_ = lin(w_.patch, 1, B * T, Act::None, false);
  for (const DiTBlockWeights& bw : w_.blocks) {
    BlockOps o;
    o.t_fc1 = lin(bw.t_fc1, 1, B, Act::Silu, false);
    o.t_fc2 = lin(bw.t_fc2, 1, B, Act::None, false);
    o.ada = lin(bw.ada, 1, B, Act::None, false);
    if (T > 0) {
      o.qkv = QkvLinear(bw.qkv, B * T);
      o.attn_out = lin(bw.attn_out, B, T, Act::None, true);
      o.fc1 = lin(bw.fc1, 1, B * T, Act::GeluTanh, false);
      o.fc2 = lin(bw.fc2, B, T, Act::None, true);
    }
    ops_.push_back(std::move(o));
  }
  final_ada_ = lin(w_.final_ada, 1, B, Act::None, false);
  if (T > 0) {
    final_out_ = lin(w_.final_out, 1, B * T, Act::None, false);
    ln_attn_ = LayerNormModulate(B, T, D, 1e-6f);
    ln_mlp_ = LayerNormModulate(B, T, D, c.norm_eps);
  }

  patches_ = Tensor::empty({B, T, int64_t(c.patch_dim_in())});
  pos_ = Tensor::empty({T, D});
  x_ = Tensor::empty({B, T, D});
  h_ = Tensor::empty({B, T, D});
  qkv_ = Tensor::empty({B, T, 3 * D});
  attn_out_ = Tensor::empty({B, T, D});
  mlp_ = Tensor::empty({B, T, 4 * D});
  tfreq_ = Tensor::empty({B, 256});
  temb_ = Tensor::empty({B, D});
  cond_ = Tensor::empty({B, D});
  mod_ = Tensor::empty({B, 6 * D});
  chunks_ = Tensor::empty({6, B, D});
  final_mod_ = Tensor::empty({B, 2 * D});
  final_chunks_ = Tensor::empty({2, B, D});

  pos_embed_2d(int(D), grid_h_, grid_w_, double(c.sample_size / c.patch), c.interpolation_scale, tokens_.begin,
               tokens_.end, pos_.f32());

  SelfAttentionShape as;
  as.batch = B;
  as.local_tokens = T;
  as.total_tokens = grid_h_ * grid_w_;
  as.heads = c.heads;
  as.head_dim = c.head_dim;
  as.compute = w_.compute;
  attn_->prepare(as);
}

void DiTTransformer::begin(const Conditioning& cond) {
  DIT_CHECK(int64_t(cond.class_ids.size()) == B_, "DiT: " << cond.class_ids.size() << " class ids for a batch of " << B_);
  for (int64_t b = 0; b < B_; ++b) {
    const int64_t y = cond.class_ids[size_t(b)];
    DIT_CHECK(y >= 0 && y <= w_.cfg.num_classes, "DiT: class id " << y << " out of range 0.." << w_.cfg.num_classes);
    y_[size_t(b)] = y;
  }
}

// cond_ = SiLU(TimestepEmbedding(t) + class_table[y])   [B, D]
void DiTTransformer::conditioning(const DiTBlockWeights& bw, size_t block, const double* t) {
  const int64_t B = B_, D = w_.cfg.hidden();
  const int64_t* y = y_.data();
  for (int64_t b = 0; b < B; ++b) timestep_embedding(t[b], 256, 1.0f, tfreq_.f32() + b * 256);
  ops_[block].t_fc1.run(tfreq_.f32(), temb_.f32());  // linear_1 + SiLU   [B, D]
  ops_[block].t_fc2.run(temb_.f32(), cond_.f32());   // linear_2          [B, D]
  for (int64_t b = 0; b < B; ++b) add(cond_.f32() + b * D, bw.class_table.f32() + y[b] * D, cond_.f32() + b * D, D);
  silu(cond_.f32(), cond_.f32(), B * D);
}

void DiTTransformer::forward(const float* latents, const double* t, float* out) {
  const DiTConfig& c = w_.cfg;
  const int64_t B = B_, T = tokens_.size(), D = c.hidden();
  float* x = x_.f32();
  float* h = h_.f32();
  auto chunk = [&](int k) { return chunks_.f32() + k * B * D; };
  // Profiler (off unless enabled): what the scopes below do not claim is norm/elementwise.
  profile::Scope prof(profile::Cat::NormElementwise);

  // Patch embedding of the local tokens + fixed positions: x = patches·Wᵀ + b + pos   [B, T, D]
  if (T > 0) {
    patchify(latents, B, c.in_channels, grid_h_ * c.patch, grid_w_ * c.patch, c.patch, tokens_.begin, tokens_.end,
             patches_.f32());
    patch_.run(patches_.f32(), x);
    for (int64_t b = 0; b < B; ++b) add(x + b * T * D, pos_.f32(), x + b * T * D, T * D);
  }

  for (size_t l = 0; l < w_.blocks.size(); ++l) {
    const BlockOps& o = ops_[l];
    conditioning(w_.blocks[l], l, t);
    o.ada.run(cond_.f32(), mod_.f32());  // [B, 6D]
    split_chunks(mod_.f32(), B, 6, D, chunks_.f32());
    // 0 shift_msa, 1 scale_msa, 2 gate_msa, 3 shift_mlp, 4 scale_mlp, 5 gate_mlp
    if (T > 0) ln_attn_.run(x, h, chunk(0), chunk(1));  // h = LN(x)(1 + scale_msa) + shift_msa
    if (T > 0) o.qkv.run(h, qkv_.f32());              // [B, T, 3, H, d]
    {
      profile::Scope pa(profile::Cat::Attention);
      attn_->forward(qkv_.f32(), attn_out_.f32());            // [B, T, H, d]  (may talk to other ranks)
    }
    if (T > 0) {
      o.attn_out.run(attn_out_.f32(), x, chunk(2));          // x += gate_msa ⊙ (attn·Wo + bo)
      ln_mlp_.run(x, h, chunk(3), chunk(4));             // h = LN(x)(1 + scale_mlp) + shift_mlp
      o.fc1.run(h, mlp_.f32());                          // GELU-tanh(h·W1 + b1)   [B, T, 4D]
      o.fc2.run(mlp_.f32(), x, chunk(5));                // x += gate_mlp ⊙ (mlp·W2 + b2)
    }
  }

  // Final layer: conditioning of block 0, shift/scale = proj_out_1(SiLU(c)), out = proj_out_2(LN(x)·(1+scale)+shift)
  conditioning(w_.blocks[0], 0, t);
  final_ada_.run(cond_.f32(), final_mod_.f32());
  split_chunks(final_mod_.f32(), B, 2, D, final_chunks_.f32());
  if (T > 0) {
    ln_attn_.run(x, h, final_chunks_.f32(), final_chunks_.f32() + B * D);
    final_out_.run(h, out);  // [B, T, p·p·C_out]
  }
}

ModelFlops DiTTransformer::flops() const {
  const DiTConfig& c = w_.cfg;
  const double B = double(B_), N = double(grid_h_ * grid_w_), D = c.hidden(), L = c.layers;
  ModelFlops f;
  f.linear = L * 2 * B * N * D * (3 * D + D + 4 * D + 4 * D) + 2 * B * N * D * (c.patch_dim_in() + c.patch_dim_out());
  f.attention = L * 4 * B * N * N * D;
  // timestep MLP + adaLN per block, and once more for the final layer (+ its 2D modulation).
  f.conditioning = (L + 1) * 2 * B * (256 * D + D * D) + L * 2 * B * D * 6 * D + 2 * B * D * 2 * D;
  return f;
}

}  // namespace dit
