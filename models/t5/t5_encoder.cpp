#include "models/t5/t5_encoder.h"

#include <cstring>
#include <limits>

#include "models/t5/t5_relative_position.h"
#include "runtime/attention.h"
#include "runtime/error.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"
#include "runtime/rms_norm.h"

namespace dit {

Linear make_local_t5_linear(T5Proj, const LinearSpec& spec, const LinearWeight& w) { return Linear(spec, w); }

struct T5Encoder::Impl {
  std::shared_ptr<const T5Weights> w;
  T5LinearFactory make_linear;
  int64_t B = 0, L = 0;
  Linear q, k, v, o, wi0, wi1, wo;  // one per projection, pointed at each block's weights in turn
  Attention attn;
  Tensor h, x, qkv, att, g0, g1;  // [B·L, D], [B·L, D], [B·L, 3I], [B·L, I], [B·L, F] x2
  Tensor key_bias;                 // [B, L]: 0 or -FLT_MAX
  Tensor rel;                      // [H, 2L - 1]: block 0's bias by j - i
  double flops = 0;
};

T5Encoder::T5Encoder(std::shared_ptr<const T5Weights> w, T5LinearFactory make_linear)
    : impl_(std::make_unique<Impl>()) {
  DIT_CHECK(w, "T5Encoder: no weights");
  impl_->w = std::move(w);
  impl_->make_linear = std::move(make_linear);
}
T5Encoder::T5Encoder(T5Encoder&&) noexcept = default;
T5Encoder& T5Encoder::operator=(T5Encoder&&) noexcept = default;
T5Encoder::~T5Encoder() = default;

void T5Encoder::prepare(int64_t batch, int64_t seq_len) {
  Impl& m = *impl_;
  const T5Weights& w = *m.w;
  const T5Config& c = w.cfg;
  DIT_CHECK(batch >= 1 && seq_len >= 1, "T5Encoder: empty shape [" << batch << ", " << seq_len << "]");
  const int64_t B = batch, L = seq_len, D = c.d_model, I = c.inner(), F = c.d_ff, H = c.num_heads;
  m.B = B;
  m.L = L;
  m.flops = 0;
  auto lin = [&](T5Proj proj, const LinearWeight& lw, Act act, bool accumulate, bool multiply,
                 int64_t out_stride = 0) {
    LinearSpec s;
    s.rows = B * L;
    s.in = lw.in();
    s.out = lw.out();
    s.act = act;
    s.accumulate = accumulate;
    s.multiply = multiply;
    s.out_stride = out_stride;
    m.flops += c.num_layers * 2.0 * double(s.rows) * double(s.in) * double(s.out);
    return m.make_linear(proj, s, lw);
  };
  const T5LayerWeights& l0 = w.layers[0];
  // Q, K and V write the column blocks of one [B·L, 3I] buffer (weights used in place).
  m.q = lin(T5Proj::Q, l0.q, Act::None, false, false, 3 * I);
  m.k = lin(T5Proj::K, l0.k, Act::None, false, false, 3 * I);
  m.v = lin(T5Proj::V, l0.v, Act::None, false, false, 3 * I);
  m.o = lin(T5Proj::O, l0.o, Act::None, true, false);            // h += o(a)
  m.wi1 = lin(T5Proj::Wi1, l0.wi1, Act::None, false, false);     // g1 = x·Wi1ᵀ
  m.wi0 = lin(T5Proj::Wi0, l0.wi0, Act::GeluTanh, false, true);  // g0 = gelu_new(x·Wi0ᵀ) ⊙ g1
  m.wo = lin(T5Proj::Wo, l0.wo, Act::None, true, false);         // h += wo(g0)
  AttentionSpec as;
  as.batch = B;
  as.heads = H;
  as.q_len = as.kv_len = L;
  as.head_dim = c.d_kv;
  as.scale = 1.0f;  // T5: no 1/sqrt(d_kv)
  as.q = as.k = as.v = AttnLayout::bthd(L, c.d_kv, H, 3 * I);
  as.out = AttnLayout::bthd(L, c.d_kv, H, I);
  as.compute = w.compute;
  m.attn = Attention(as);
  m.flops += c.num_layers * m.attn.flops();

  m.h = Tensor::empty({B * L, D});
  m.x = Tensor::empty({B * L, D});
  m.qkv = Tensor::empty({B * L, 3 * I});
  m.att = Tensor::empty({B * L, I});
  m.g0 = Tensor::empty({B * L, F});
  m.g1 = Tensor::empty({B * L, F});
  m.key_bias = Tensor::empty({B, L});
  m.rel = Tensor::empty({H, 2 * L - 1});
  t5_relative_bias_diagonals(w.rel_bias.f32(), c.num_buckets, c.max_distance, H, L, m.rel.f32());
}

void T5Encoder::encode(const int64_t* ids, const int64_t* mask, float* out) {
  Impl& m = *impl_;
  DIT_CHECK(m.B > 0, "T5Encoder::encode before prepare");
  const T5Weights& w = *m.w;
  const T5Config& c = w.cfg;
  const int64_t B = m.B, L = m.L, D = c.d_model, I = c.inner();
  float* h = m.h.f32();
  float* x = m.x.f32();
  float* qkv = m.qkv.f32();
  {
    profile::Scope prof(profile::Cat::NormElementwise);
    for (int64_t r = 0; r < B * L; ++r) {
      DIT_CHECK(ids[r] >= 0 && ids[r] < c.vocab_size, "T5 encoder: token id " << ids[r] << " at position " << r % L
                                                          << " of sequence " << r / L << " is outside 0.."
                                                          << c.vocab_size - 1);
      DIT_CHECK(mask[r] == 0 || mask[r] == 1, "T5 encoder: attention mask value " << mask[r] << " at position "
                                                  << r % L << " of sequence " << r / L << " (expected 0 or 1)");
      // (1 - m)·finfo(float32).min, added into the position bias by transformers.
      m.key_bias.f32()[r] = mask[r] ? 0.f : -std::numeric_limits<float>::max();
    }
    // Embedding lookup (no scaling); BF16 rows widen to f32 exactly.
    parallel_for(B * L, B * L * D > 16384, [&](int64_t r) {
      float* dst = h + r * D;
      if (w.embedding.dtype() == DType::F32) {
        std::memcpy(dst, w.embedding.f32() + ids[r] * D, sizeof(float) * D);
      } else {
        const uint16_t* src = w.embedding.bf16() + ids[r] * D;
        for (int64_t j = 0; j < D; ++j) dst[j] = bf16_to_f32(src[j]);
      }
    });
  }
  AttnBias bias;
  bias.key = m.key_bias.f32();
  bias.rel = m.rel.f32();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const T5LayerWeights& lw = w.layers[size_t(i)];
    m.q.set_weight(lw.q);
    m.k.set_weight(lw.k);
    m.v.set_weight(lw.v);
    m.o.set_weight(lw.o);
    m.wi0.set_weight(lw.wi0);
    m.wi1.set_weight(lw.wi1);
    m.wo.set_weight(lw.wo);
    rms_norm(h, lw.ln_attn.f32(), x, B * L, D, c.eps);
    m.q.run(x, qkv);
    m.k.run(x, qkv + I);
    m.v.run(x, qkv + 2 * I);
    {
      profile::Scope prof(profile::Cat::Attention);
      m.attn.run(qkv, qkv + I, qkv + 2 * I, m.att.f32(), nullptr, &bias);
    }
    m.o.run(m.att.f32(), h);
    rms_norm(h, lw.ln_ff.f32(), x, B * L, D, c.eps);
    m.wi1.run(x, m.g1.f32());
    m.wi0.run(x, m.g0.f32(), nullptr, m.g1.f32());
    m.wo.run(m.g0.f32(), h);
  }
  rms_norm(h, w.final_ln.f32(), out, B * L, D, c.eps);
}

int64_t T5Encoder::batch() const { return impl_->B; }
int64_t T5Encoder::seq_len() const { return impl_->L; }
const T5Weights& T5Encoder::weights() const { return *impl_->w; }
double T5Encoder::flops() const { return impl_->flops; }
size_t T5Encoder::drop_resident_pages() const { return impl_->w->drop_pages(); }

}  // namespace dit
