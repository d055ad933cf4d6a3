#include "models/t5/t5_encoder.h"

#include "runtime/elementwise.h"

#include <cstring>
#include <limits>

#include "models/t5/t5_relative_position.h"
#include "runtime/attention.h"
#include "runtime/error.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"
#include "runtime/rms_norm.h"

namespace dit {

struct T5Encoder::Impl {
  std::shared_ptr<const T5Weights> w;
  std::shared_ptr<TensorParallel> tp;
  int64_t B = 0, L = 0;
  Linear q, k, v, o, wi0, wi1, wo;  // one per projection, pointed at each block's weights in turn
  Attention attn;
  // [B·L, D] x2, [3, B·L, I'], [B·L, I'], [B·L, F'] x2, [B·L, D]; I', F': this rank's share of I, F
  Tensor h, x, qkv, att, g0, g1, partial;
  Tensor key_bias;                 // [B, L]: 0 or -FLT_MAX
  Tensor rel;                      // [H, 2L - 1]: block 0's bias by j - i
  double flops = 0;
};

T5Encoder::T5Encoder(std::shared_ptr<const T5Weights> w, std::shared_ptr<TensorParallel> tp)
    : impl_(std::make_unique<Impl>()) {
  DIT_CHECK(w, "T5Encoder: no weights");
  impl_->w = std::move(w);
  impl_->tp = tp ? std::move(tp) : std::shared_ptr<TensorParallel>(make_serial_tensor_parallel());
}
T5Encoder::T5Encoder(T5Encoder&&) noexcept = default;
T5Encoder& T5Encoder::operator=(T5Encoder&&) noexcept = default;
T5Encoder::~T5Encoder() = default;

void T5Encoder::prepare(int64_t batch, int64_t seq_len) {
  Impl& m = *impl_;
  const T5Weights& w = *m.w;
  const T5Config& c = w.cfg;
  DIT_CHECK(batch >= 1 && seq_len >= 1, "T5Encoder: empty shape [" << batch << ", " << seq_len << "]");
  const T5LayerWeights& l0 = w.layers[0];
  // This rank's heads and d_ff columns (all of them with one rank).
  const int64_t B = batch, L = seq_len, D = c.d_model, I = l0.q.out(), F = l0.wi0.out(), H = w.heads.size();
  m.B = B;
  m.L = L;
  m.flops = 0;
  auto lin = [&](const LinearWeight& lw, Act act, bool multiply) {
    LinearSpec s;
    s.rows = B * L;
    s.in = lw.in();
    s.out = lw.out();
    s.act = act;
    s.multiply = multiply;
    m.flops += c.num_layers * 2.0 * double(s.rows) * double(s.in) * double(s.out);
    return Linear(s, lw);
  };
  // Q, K and V write three dense [B·L, I'] blocks of one buffer (weights used in place): dense
  // outputs, not the column blocks of a [B·L, 3I'] buffer, which oneDNN 2.6 gives to gemm:jit
  // with a private scratchpad of the whole output per projection (docs/benchmarks.md, "T5's
  // Q, K and V as dense outputs").
  m.q = lin(l0.q, Act::None, false);
  m.k = lin(l0.k, Act::None, false);
  m.v = lin(l0.v, Act::None, false);
  m.o = lin(l0.o, Act::None, false);            // partial = o(a) (summed over the ranks), h += partial
  m.wi1 = lin(l0.wi1, Act::None, false);        // g1 = x·Wi1ᵀ
  m.wi0 = lin(l0.wi0, Act::GeluTanh, true);     // g0 = gelu_new(x·Wi0ᵀ) ⊙ g1
  m.wo = lin(l0.wo, Act::None, false);          // partial = wo(g0), h += partial
  AttentionSpec as;
  as.batch = B;
  as.heads = H;
  as.q_len = as.kv_len = L;
  as.head_dim = c.d_kv;
  as.scale = 1.0f;  // T5: no 1/sqrt(d_kv)
  as.q = as.k = as.v = as.out = AttnLayout::bthd(L, c.d_kv, H, I);
  as.compute = w.compute;
  m.attn = Attention(as);
  m.flops += c.num_layers * m.attn.flops();

  m.h = Tensor::empty({B * L, D});
  m.x = Tensor::empty({B * L, D});
  m.qkv = Tensor::empty({3, B * L, I});
  m.att = Tensor::empty({B * L, I});
  m.g0 = Tensor::empty({B * L, F});
  m.g1 = Tensor::empty({B * L, F});
  m.partial = Tensor::empty({B * L, D});
  m.key_bias = Tensor::empty({B, L});
  m.rel = Tensor::empty({H, 2 * L - 1});
  t5_relative_bias_diagonals(w.rel_bias.f32(), c.num_buckets, c.max_distance, H, L, m.rel.f32());
}

void T5Encoder::encode(const int64_t* ids, const int64_t* mask, float* out) {
  Impl& m = *impl_;
  DIT_CHECK(m.B > 0, "T5Encoder::encode before prepare");
  const T5Weights& w = *m.w;
  const T5Config& c = w.cfg;
  const int64_t B = m.B, L = m.L, D = c.d_model, I = w.layers[0].q.out(), V0 = w.vocab.begin, V1 = w.vocab.end;
  float* h = m.h.f32();
  float* x = m.x.f32();
  float* q = m.qkv.f32();  // [B·L, I'] each
  float* k = q + B * L * I;
  float* v = k + B * L * I;
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
    // Embedding lookup (no scaling); BF16 rows widen to f32 exactly. Vocab-parallel: rows of
    // ids outside this rank's vocabulary are zero, and the ranks' lookups are summed.
    parallel_for(B * L, B * L * D > 16384, [&](int64_t r) {
      float* dst = h + r * D;
      const int64_t id = ids[r] - V0;
      if (ids[r] < V0 || ids[r] >= V1) {
        std::memset(dst, 0, sizeof(float) * D);
      } else if (w.embedding.dtype() == DType::F32) {
        std::memcpy(dst, w.embedding.f32() + id * D, sizeof(float) * D);
      } else {
        const uint16_t* src = w.embedding.bf16() + id * D;
        for (int64_t j = 0; j < D; ++j) dst[j] = bf16_to_f32(src[j]);
      }
    });
  }
  m.tp->all_reduce(h, B * L * D);
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
    m.q.run(x, q);
    m.k.run(x, k);
    m.v.run(x, v);
    {
      profile::Scope prof(profile::Cat::Attention);
      m.attn.run(q, k, v, m.att.f32(), nullptr, &bias);
    }
    m.o.run(m.att.f32(), m.partial.f32());
    m.tp->all_reduce(m.partial.f32(), B * L * D);  // row-parallel: the ranks' partial sums
    add(h, m.partial.f32(), h, B * L * D);         // h += o(a)
    rms_norm(h, lw.ln_ff.f32(), x, B * L, D, c.eps);
    m.wi1.run(x, m.g1.f32());
    m.wi0.run(x, m.g0.f32(), nullptr, m.g1.f32());
    m.wo.run(m.g0.f32(), m.partial.f32());
    m.tp->all_reduce(m.partial.f32(), B * L * D);
    add(h, m.partial.f32(), h, B * L * D);         // h += wo(g0)
  }
  rms_norm(h, w.final_ln.f32(), out, B * L, D, c.eps);
}

int64_t T5Encoder::batch() const { return impl_->B; }
int64_t T5Encoder::seq_len() const { return impl_->L; }
const T5Weights& T5Encoder::weights() const { return *impl_->w; }
double T5Encoder::flops() const { return impl_->flops; }
size_t T5Encoder::drop_resident_pages() const { return impl_->w->drop_pages(); }

}  // namespace dit
