#include "models/common/qkv.h"

#include <cstring>
#include <type_traits>

#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"
#include "runtime/safetensors.h"

namespace dit {

QkvWeights QkvWeights::load(const WeightStore& s, const std::string& a, int64_t D, DType compute, QkvProjection how,
                            const TpPlan& plan, const TensorParallel& tp, int64_t head_dim) {
  QkvWeights w;
  LinearWeight* parts[] = {&w.q, &w.k, &w.v};
  const char* names[] = {"to_q", "to_k", "to_v"};
  for (int i = 0; i < 3; ++i) *parts[i] = load_linear(s, a + names[i], D, D, compute, plan, tp, head_dim).w;
  // Auto fuses unless the parts are shared views that cannot be packed (read in place without a
  // cache): fused from a packed entry they stay shared, converted they are private either way.
  const bool packable = w.q.packed && w.k.packed && w.v.packed;
  const bool fuse = how == QkvProjection::Fused ||
                    (how == QkvProjection::Auto && (packable || !s.in_place(a + "to_q.weight", compute)));
  if (!fuse) return w;
  w.qkv = LinearWeight::stack({w.q, w.k, w.v});  // row blocks of an entry, or a private concatenation
  w.q = w.k = w.v = LinearWeight();
  return w;
}

QkvLinear::QkvLinear(const QkvWeights& w, int64_t rows, DType output, DType input)
    : fused_(w.fused()), output_(output), input_(input) {
  const DType compute = w.fused() ? w.qkv.compute : w.q.compute;
  DIT_CHECK(input == DType::F32 || compute == DType::BF16, "QkvLinear: a bf16 input needs bf16 compute");
  auto spec = [&](const LinearWeight& lw, int64_t out_stride) {
    LinearSpec s;
    s.rows = rows;
    s.in = lw.in();
    s.out = lw.out();
    s.out_stride = out_stride;
    s.output = output;
    s.input = input;
    return s;
  };
  D_ = w.out();  // output features per projection (this rank's heads × head_dim)
  if (fused_) {
    qkv_ = Linear(spec(w.qkv, 0), w.qkv);
  } else {  // three matmuls writing the Q, K, V column blocks of one [rows, 3·D_] buffer
    const bool bf16 = compute == DType::BF16;
    auto split = [&](const LinearWeight& lw) {
      LinearSpec s = spec(lw, 3 * D_);
      if (bf16) s.input = DType::BF16;  // x given in bf16, or converted once in run()
      return s;
    };
    q_ = Linear(split(w.q), w.q);
    k_ = Linear(split(w.k), w.k);
    v_ = Linear(split(w.v), w.v);
    if (bf16 && input == DType::F32) xb_ = Tensor::empty({rows, w.q.in()}, DType::BF16);
  }
}

template <class X, class Y>
void QkvLinear::run_any(const X* x, Y* y) const {
  DIT_CHECK((std::is_same_v<Y, uint16_t>) == (output_ == DType::BF16) &&
                (std::is_same_v<X, uint16_t>) == (input_ == DType::BF16),
            "QkvLinear: run with " << (std::is_same_v<X, uint16_t> ? "bf16" : "f32") << " x and "
                                   << (std::is_same_v<Y, uint16_t> ? "bf16" : "f32") << " q, k, v, made for "
                                   << dtype_name(input_) << " and " << dtype_name(output_));
  if (fused_) {
    qkv_.run(x, y);
    return;
  }
  if constexpr (std::is_same_v<X, float>) {
    if (xb_.defined()) {  // bf16 compute from an f32 x: rounded once for the three matmuls
      const int64_t rows = xb_.dim(0), in = xb_.dim(1);
      uint16_t* xb = xb_.bf16();
      {
        profile::Scope p(profile::Cat::Linear);  // the conversion each matmul would have made
        parallel_for(rows, rows * in > 16384, [&](int64_t r) { to_bf16(x + r * in, xb + r * in, in); });
      }
      return run_split(xb, y);
    }
  }
  run_split(x, y);
}

template <class X, class Y>
void QkvLinear::run_split(const X* x, Y* y) const {
  q_.run(x, y);
  k_.run(x, y + D_);
  v_.run(x, y + 2 * D_);
}

void QkvLinear::run(const float* x, float* y) const { run_any(x, y); }
void QkvLinear::run(const float* x, uint16_t* y) const { run_any(x, y); }
void QkvLinear::run(const uint16_t* x, float* y) const { run_any(x, y); }
void QkvLinear::run(const uint16_t* x, uint16_t* y) const { run_any(x, y); }

namespace {

// The local form: a QkvLinear over this rank's rows (none: nothing).
class LocalQkv final : public Projection {
 public:
  LocalQkv(const QkvWeights& w, int64_t rows, DType output, DType input) : output_(output), input_(input) {
    if (rows > 0) op_ = QkvLinear(w, rows, output, input);
    has_rows_ = rows > 0;
  }
  void run(const void* x, void* y) override {
    if (!has_rows_) return;
    if (input_ == DType::BF16)
      run_to(static_cast<const uint16_t*>(x), y);
    else
      run_to(static_cast<const float*>(x), y);
  }

 private:
  template <class X>
  void run_to(const X* x, void* y) {
    if (output_ == DType::BF16)
      op_.run(x, static_cast<uint16_t*>(y));
    else
      op_.run(x, static_cast<float*>(y));
  }
  QkvLinear op_;
  DType output_, input_;
  bool has_rows_ = false;
};

void project(Projection& op, BlockInput h, void* qkv) {
  if (h.bf16)
    op.run(h.bf16, qkv);
  else
    op.run(h.f32, qkv);
}

}  // namespace

std::unique_ptr<Projection> make_block_qkv(LayerContext& layers, const QkvWeights& w, int64_t B, int64_t T,
                                           int64_t D, DType output, DType input) {
  ProjectionParts p;
  p.shape = {B, T, D, 3 * w.out(), input, output};
  if (w.out() == D) {  // every head here (no tensor parallelism)
    if (w.fused())
      p.whole = {&w.qkv};
    else
      p.whole = {&w.q, &w.k, &w.v};
  }
  p.local = std::make_unique<LocalQkv>(w, B * T, output, input);
  return layers.projection(std::move(p));
}

void project_and_attend(Projection& op, SelfAttention& attn, BlockInput h, Tensor& qkv, Tensor& out) {
  // Where the attention reads them best (e.g. where other ranks read), or null. A shared
  // projection's own rows are computed there too (its window is another: ProcessGroup::split).
  void* at = attn.qkv_destination();
  if (qkv.dtype() == DType::BF16) {
    uint16_t* y = at ? static_cast<uint16_t*>(at) : qkv.bf16();
    project(op, h, y);  // [B, T, 3, H', d] (every rank: the projection may be shared)
    profile::Scope pa(profile::Cat::Attention);
    if (out.dtype() == DType::BF16)
      attn.forward(y, out.bf16());  // [B, T, H', d]
    else
      attn.forward(y, out.f32());
  } else {
    DIT_CHECK(out.dtype() == DType::F32, "attention: bf16 output from f32 q, k, v");
    float* y = at ? static_cast<float*>(at) : qkv.f32();
    project(op, h, y);
    profile::Scope pa(profile::Cat::Attention);
    attn.forward(y, out.f32());
  }
}

void attention_output(ParallelLinear& op, const Tensor& out, float* x, const float* gate) {
  for_element_type(out.dtype(), [&](auto tag) { op.run(out.as<decltype(tag)>(), x, gate); });
}

}  // namespace dit
