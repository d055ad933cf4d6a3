#include "models/pixart/pixart_transformer.h"

#include <algorithm>
#include <cstring>

#include "models/common/block_input.h"
#include "models/common/embeddings.h"
#include "models/common/feed_forward.h"
#include "models/common/patch_grid.h"
#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

// out[k, b, :] = table[k, :] + v[b, k·D : (k+1)·D] for k < n, with v [B, n·D] when per_k,
// else v [B, D] (the same vector added to every row of the table).
void add_table(const float* table, const float* v, int64_t batch, int64_t n, int64_t D, bool per_k, float* out) {
  for (int64_t k = 0; k < n; ++k)
    for (int64_t b = 0; b < batch; ++b)
      add(table + k * D, v + (per_k ? (b * n + k) * D : b * D), out + (k * batch + b) * D, D);
}

}  // namespace

int64_t attended_text_tokens(const float* mask, int64_t batch, int64_t L) {
  int64_t used = 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t last = -1;
    for (int64_t i = 0; i < L; ++i)
      if (mask[b * L + i] != 0.f) last = i;
    if (last < 0) return L;
    used = std::max(used, last + 1);
  }
  return used;
}

PixArtTransformer::PixArtTransformer(PixArtWeights w, std::unique_ptr<TensorParallel> tp)
    : w_(std::move(w)), tp_(std::move(tp)), geo_(geometry_of(w_.cfg)) {}

// Per shape: which tokens this rank holds, both attentions, the linears, the buffers.
void PixArtTransformer::prepare(const ModelShape& s, ParallelContext& ctx) {
  const PixArtConfig& c = w_.cfg;
  check_latent_grid("PixArt", s, c.patch);
  DIT_CHECK(s.text_tokens >= 1, "PixArt: a text length is required");
  B_ = s.batch;
  L_ = kv_used_ = s.text_tokens;
  img_ = image_tokens(s, c.patch, ctx, *tp_, c.hidden());
  if (!attn_) attn_ = ctx.layers().self_attention();  // once: they may hold communication state
  if (!cross_) cross_ = ctx.layers().cross_attention();
  const int64_t Hl = w_.blocks[0].qkv.out() / c.head_dim;  // this rank's heads
  // batch, tokens here, all, heads, d
  attn_->prepare(SelfAttentionShape{B_, img_.tokens.size(), img_.all(), Hl, c.head_dim, w_.compute});
  CrossAttentionShape cs;
  cs.batch = B_;
  cs.q_tokens = img_.tokens.size();
  cs.kv_tokens = L_;
  cs.heads = Hl;
  cs.head_dim = c.head_dim;
  cs.compute = w_.compute;
  cross_->prepare(cs);
  make_linears(ctx.layers());
  allocate();
}

// The embedders' and the output's linears, and every block's (its text K/V projections run
// once per request over the caption, the rest per step over this rank's tokens).
void PixArtTransformer::make_linears(LayerContext& layers) {
  const PixArtConfig& c = w_.cfg;
  const int64_t B = B_, T = img_.tokens.size(), D = c.hidden(), L = L_, R = img_.res.size(), O = img_.out.size();
  const DType hidden = ffn_hidden_dtype(w_.compute);   // models/common/feed_forward.h
  const DType normed = block_input_dtype(w_.compute);  // models/common/block_input.h
  const DType qkv_type = attn_->qkv_dtype();   // bf16 where the attention reads bf16 q, k, v
  const DType attn_type = attn_->out_dtype();  // bf16 where it writes bf16 (local attention)
  const DType cross_type = cross_->io_dtype();  // its q, k, v and output: bf16 with bf16 compute
  if (R > 0) patch_ = make_linear(w_.patch, B * R);
  t_fc1_ = make_linear(w_.t_embed.fc1, B, Act::Silu);
  t_fc2_ = make_linear(w_.t_embed.fc2, B);
  if (c.use_additional_conditions) {
    res_fc1_ = make_linear(w_.res_embed.fc1, 2 * B, Act::Silu);
    res_fc2_ = make_linear(w_.res_embed.fc2, 2 * B);
    ar_fc1_ = make_linear(w_.ar_embed.fc1, B, Act::Silu);
    ar_fc2_ = make_linear(w_.ar_embed.fc2, B);
  }
  ada_ = make_linear(w_.ada, B);
  const int64_t Ml = w_.blocks[0].fc1.out();  // this rank's MLP columns
  mlp_ = Tensor::empty({B, T, Ml}, hidden);  // the blocks' feed-forward activations
  caption1_ = make_linear(w_.caption1, B * L, Act::GeluTanh);
  caption2_ = make_linear(w_.caption2, B * L);
  ops_.clear();
  for (const PixArtBlockWeights& bw : w_.blocks) {
    BlockOps o;
    o.k2 = make_linear(bw.k2, B * L, Act::None, cross_type);
    o.v2 = make_linear(bw.v2, B * L, Act::None, cross_type);
    o.qkv = make_block_qkv(layers, bw.qkv, B, T, D, qkv_type, normed);  // every rank
    if (T > 0) {
      o.attn1_out = block_linear(*tp_, bw.attn1_out, {B, T, D, D, /*gated=*/true, false, attn_type});
      o.q2 = make_linear(bw.q2, B * T, Act::None, cross_type);
      o.attn2_out = block_linear(*tp_, bw.attn2_out, {B, T, D, D, false, /*accumulate=*/true, cross_type});
    }
    o.ffn = make_block_feed_forward(layers, *tp_, bw.fc1, bw.fc2, B, T, D, w_.compute, mlp_);  // every rank
    ops_.push_back(std::move(o));
  }
  if (R > 0) {
    ln_ = LayerNormModulate(B, R, D, c.norm_eps);
    ln_final_ = LayerNormModulate(B, R, D, 1e-6f);
  }
  if (O > 0) proj_out_ = make_linear(w_.proj_out, B * O);
}

// The activations (per shape) and the per-request tensors, in the types the linears and the
// attentions read and write; this rank's rows of the position embedding.
void PixArtTransformer::allocate() {
  const PixArtConfig& c = w_.cfg;
  const int64_t B = B_, T = img_.tokens.size(), D = c.hidden(), L = L_, R = img_.res.size(), O = img_.out.size();
  const int64_t Dl = w_.blocks[0].qkv.out();  // this rank's heads·d
  const DType normed = block_input_dtype(w_.compute), cross_type = cross_->io_dtype();
  k2_.assign(w_.blocks.size(), Tensor());
  v2_.assign(w_.blocks.size(), Tensor());
  for (size_t l = 0; l < w_.blocks.size(); ++l) {
    k2_[l] = Tensor::empty({B, L, Dl}, cross_type);
    v2_[l] = Tensor::empty({B, L, Dl}, cross_type);
  }
  patches_ = Tensor::empty({B, R, int64_t(c.patch_dim_in())});
  pos_ = Tensor::empty({R, D});
  x_ = Tensor::empty({B, R, D});
  h_ = Tensor::empty({B, R, D});  // the final layer's norm
  hn_ = normed == DType::F32 ? h_ : Tensor::empty({B, R, D}, normed);  // (f32: the same buffer, used in turn)
  hout_ = O < R ? Tensor::empty({B, O, D}) : Tensor();
  qkv_ = Tensor::empty({B, T, 3 * Dl}, attn_->qkv_dtype());
  self_out_ = Tensor::empty({B, T, Dl}, attn_->out_dtype());
  cross_out_ = Tensor::empty({B, T, Dl}, cross_type);
  q2_ = Tensor::empty({B, T, Dl}, cross_type);
  tfreq_ = Tensor::empty({B, 256});
  temb_ = Tensor::empty({B, D});
  emb_ = Tensor::empty({B, D});
  t6_ = Tensor::empty({B, 6 * D});
  chunks_ = Tensor::empty({6, B, D});
  final_chunks_ = Tensor::empty({2, B, D});
  micro_ = Tensor::empty({B, D});
  key_bias_ = Tensor::empty({B, L});
  caption_ = Tensor::empty({B, L, D});
  caption_h_ = Tensor::empty({B, L, D});
  pos_embed_2d(int(D), img_.grid_h, img_.grid_w, double(c.sample_size / c.patch), c.interpolation_scale, img_.res.begin,
               img_.res.end, pos_.f32());
}

void PixArtTransformer::begin(const Conditioning& cond) {
  const PixArtConfig& c = w_.cfg;
  const int64_t B = B_, L = L_, D = c.hidden();
  DIT_CHECK(cond.batch == B && cond.text.defined() && cond.text.shape() == Shape({B, L, int64_t(c.caption_channels)}) &&
                cond.text_mask.defined() && cond.text_mask.shape() == Shape({B, L}),
            "PixArt: the conditioning must be text states [" << B << ", " << L << ", " << c.caption_channels
                                                             << "] and a mask [" << B << ", " << L << "]");
  // Cross-attention padding bias (1 - m)·(-10000), as diffusers builds it.
  for (int64_t i = 0; i < B * L; ++i) key_bias_.f32()[i] = (1.0f - cond.text_mask.f32()[i]) * -10000.0f;
  // Only the keys up to the batch's last unmasked token are attended: the padding past it
  // weighs nothing (docs/pixart.md, "Cross-attention over the prompt's tokens").
  kv_used_ = attended_text_tokens(cond.text_mask.f32(), B, L);
  cross_->use_keys(kv_used_);
  // y = linear_2(GELU-tanh(linear_1(T5 states)))   [B, L, D], then every block's K and V of it.
  caption1_.run(cond.text.f32(), caption_h_.f32());
  caption2_.run(caption_h_.f32(), caption_.f32());
  for (size_t l = 0; l < ops_.size(); ++l)
    for_element_type(k2_[l].dtype(), [&](auto tag) {  // bf16 where the cross-attention reads bf16
      using T = decltype(tag);
      ops_[l].k2.run(caption_.f32(), k2_[l].as<T>());
      ops_[l].v2.run(caption_.f32(), v2_[l].as<T>());
    });
  if (!c.use_additional_conditions) return;
  // α micro-conditions of the generated size: [emb(H), emb(W)] ++ emb(H/W), each value through
  // the 256-d sinusoid (flip, shift 0) and its embedder   [B, D]
  DIT_CHECK(cond.image_height > 0 && cond.image_width > 0, "PixArt-α: the image size micro-condition is missing");
  const int64_t S = D / 3;
  Tensor rf = Tensor::empty({2 * B, 256}), rh = Tensor::empty({2 * B, S}), ro = Tensor::empty({2 * B, S});
  Tensor af = Tensor::empty({B, 256}), ah = Tensor::empty({B, S}), ao = Tensor::empty({B, S});
  const float aspect = float(double(cond.image_height) / double(cond.image_width));
  for (int64_t b = 0; b < B; ++b) {
    timestep_embedding(double(cond.image_height), 256, 0.0f, rf.f32() + (2 * b) * 256);
    timestep_embedding(double(cond.image_width), 256, 0.0f, rf.f32() + (2 * b + 1) * 256);
    timestep_embedding(double(aspect), 256, 0.0f, af.f32() + b * 256);
  }
  res_fc1_.run(rf.f32(), rh.f32());
  res_fc2_.run(rh.f32(), ro.f32());  // [2B, S] = [B, 2S]: emb(H), emb(W)
  ar_fc1_.run(af.f32(), ah.f32());
  ar_fc2_.run(ah.f32(), ao.f32());
  for (int64_t b = 0; b < B; ++b) {
    std::memcpy(micro_.f32() + b * D, ro.f32() + b * 2 * S, size_t(2 * S) * 4);
    std::memcpy(micro_.f32() + b * D + 2 * S, ao.f32() + b * S, size_t(S) * 4);
  }
}

// emb_ = TimestepEmbedding(t) (+ micro-conditions); t6_ = ada(SiLU(emb_)).
void PixArtTransformer::embed_timestep(const double* t) {
  profile::Scope prof(profile::Cat::Conditioning);
  const int64_t B = B_, D = w_.cfg.hidden();
  for (int64_t b = 0; b < B; ++b) timestep_embedding(t[b], 256, 0.0f, tfreq_.f32() + b * 256);
  t_fc1_.run(tfreq_.f32(), temb_.f32());  // linear_1 + SiLU
  t_fc2_.run(temb_.f32(), emb_.f32());    // linear_2
  if (w_.cfg.use_additional_conditions) add(emb_.f32(), micro_.f32(), emb_.f32(), B * D);
  silu(emb_.f32(), temb_.f32(), B * D);
  ada_.run(temb_.f32(), t6_.f32());       // [B, 6D]
}

// x += gate_msa ⊙ SelfAttn(LN(x)(1 + scale_msa) + shift_msa)     (x: the residual rows [B, R, D])
void PixArtTransformer::self_attention(size_t l, float* x) {
  const int64_t B = B_, R = img_.res.size(), T = img_.tokens.size(), D = w_.cfg.hidden();
  const BlockOps& o = ops_[l];
  auto chunk = [&](int k) { return chunks_.f32() + k * B * D; };
  // h = LN(x)(1 + scale_msa) + shift_msa on the residual rows, gathered to [B, T, D]
  const BlockInput h = modulated_norm(*tp_, ln_, x, hn_, chunk(0), chunk(1), R > 0);
  project_and_attend(*o.qkv, *attn_, h, qkv_, self_out_);  // [B, T, 3, H', d] -> [B, T, H', d]
  if (T > 0) attention_output(*o.attn1_out, self_out_, x, chunk(2));
}

// x += CrossAttn(q = x·Wq, k, v = the projected caption) · Wo   (no norm, no gate)
void PixArtTransformer::cross_attention(size_t l, float* x) {
  const float* xf = tp_->gather(x);  // [B, T, D]
  if (img_.tokens.size() == 0) return;
  const BlockOps& o = ops_[l];
  for_element_type(q2_.dtype(), [&](auto tag) {  // q, k, v and the output in cross_->io_dtype()
    using T = decltype(tag);
    o.q2.run(xf, q2_.as<T>());  // [B, T, D]
    {
      profile::Scope pa(profile::Cat::CrossAttention);
      cross_->forward(q2_.as<T>(), k2_[l].as<T>(), v2_[l].as<T>(), key_bias_.f32(), cross_out_.as<T>());
    }
    o.attn2_out->run(cross_out_.as<T>(), x);
  });
}

void PixArtTransformer::forward(const float* latents, const double* t, float* out) {
  const PixArtConfig& c = w_.cfg;
  const int64_t B = B_, R = img_.res.size(), O = img_.out.size(), D = c.hidden();
  float* x = x_.f32();
  profile::Scope prof(profile::Cat::NormElementwise);

  // Patch embedding of the residual rows + fixed positions   [B, R, D]
  if (R > 0) {
    patchify(latents, B, c.in_channels, img_.grid_h * c.patch, img_.grid_w * c.patch, c.patch, img_.res.begin,
             img_.res.end, patches_.f32());
    patch_.run(patches_.f32(), x);
    for (int64_t b = 0; b < B; ++b) add(x + b * R * D, pos_.f32(), x + b * R * D, R * D);
  }
  embed_timestep(t);

  for (size_t l = 0; l < ops_.size(); ++l) {
    // 0 shift_msa, 1 scale_msa, 2 gate_msa, 3 shift_mlp, 4 scale_mlp, 5 gate_mlp = table + t6
    add_table(w_.blocks[l].scale_shift_table.f32(), t6_.f32(), B, 6, D, true, chunks_.f32());
    self_attention(l, x);
    cross_attention(l, x);
    const BlockOps& o = ops_[l];
    // h = LN(x)(1 + scale_mlp) + shift_mlp, gathered to [B, T, D]
    const BlockInput h = modulated_norm(*tp_, ln_, x, hn_, chunks_.f32() + 3 * B * D, chunks_.f32() + 4 * B * D, R > 0);
    run_feed_forward(*o.ffn, h, x, chunks_.f32() + 5 * B * D);  // x += gate_mlp ⊙ FF(h)
  }

  // Final layer: shift, scale = final table + embedded timestep; out = proj_out(LN(x)(1 + scale) + shift)
  add_table(w_.scale_shift_table.f32(), emb_.f32(), B, 2, D, false, final_chunks_.f32());
  if (O == 0) return;
  ln_final_.run(x, h_.f32(), final_chunks_.f32(), final_chunks_.f32() + B * D);
  const float* h = h_.f32();
  if (O < R) {  // tensor parallel without Megatron SP: this rank outputs a share of the rows
    copy_rows(h_.f32(), B, R, img_.out.begin - img_.res.begin, O, D, hout_.f32());
    h = hout_.f32();
  }
  proj_out_.run(h, out);  // [B, O, p·p·C_out]
}

ModelFlops PixArtTransformer::flops() const {
  const PixArtConfig& c = w_.cfg;
  const double B = double(B_), N = double(img_.all()), D = c.hidden(), L = c.layers, T = double(L_);
  const double Tx = double(kv_used_);  // the text tokens the cross-attention reads (the last request's)
  ModelFlops f;
  // per block: Q/K/V + self out, cross Q + cross out, MLP; patch embedding and output projection
  f.linear = L * 2 * B * N * D * (3 * D + D + D + D + 4 * D + 4 * D) + 2 * B * N * D * (c.patch_dim_in() + c.patch_dim_out());
  f.attention = L * 4 * B * N * N * D;
  f.cross_attention = L * 4 * B * N * Tx * D;
  // timestep MLP and adaLN-single, once per step
  f.conditioning = 2 * B * (256 * D + D * D) + 2 * B * D * 6 * D;
  // caption projection and every block's cross K/V, once per request
  f.per_request = 2 * B * T * (double(c.caption_channels) * D + D * D) + L * 2 * 2 * B * T * D * D;
  return f;
}

}  // namespace dit
