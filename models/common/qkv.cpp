#include "models/common/qkv.h"

#include <cstring>

#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace dit {

Tensor concat_rows(const std::vector<Tensor>& parts) {
  DIT_CHECK(!parts.empty(), "concat_rows: nothing to concatenate");
  int64_t rows = 0;
  const int64_t cols = parts[0].dim(1);
  for (const Tensor& p : parts) {
    DIT_CHECK(p.ndim() == 2 && p.dim(1) == cols && p.dtype() == parts[0].dtype(),
              "concat_rows: mismatched parts " << shape_str(p.shape()));
    rows += p.dim(0);
  }
  Tensor out = Tensor::empty({rows, cols}, parts[0].dtype());
  char* dst = static_cast<char*>(out.data());
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

namespace {

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }

}  // namespace

QkvWeights QkvWeights::load(const WeightStore& s, const std::string& a, int64_t D, DType compute, QkvProjection how) {
  QkvWeights w;
  const bool fuse = how == QkvProjection::Fused ||
                    (how == QkvProjection::Auto && s.get(a + "to_q.weight", {D, D}).dtype() != compute);
  if (!fuse) {
    const std::pair<const char*, LinearWeight*> parts[] = {{"to_q", &w.q}, {"to_k", &w.k}, {"to_v", &w.v}};
    for (const auto& [name, dst] : parts)
      *dst = LinearWeight::prepare(s.get(a + name + ".weight", {D, D}), s.get(a + name + ".bias", {D}), compute);
    return w;
  }
  Tensor qkv_w = concat_rows({s.get(a + "to_q.weight", {D, D}), s.get(a + "to_k.weight", {D, D}),
                              s.get(a + "to_v.weight", {D, D})});
  Tensor qkv_b = concat_rows({as_f32(s.get(a + "to_q.bias", {D})).reshape({1, D}),
                              as_f32(s.get(a + "to_k.bias", {D})).reshape({1, D}),
                              as_f32(s.get(a + "to_v.bias", {D})).reshape({1, D})})
                     .reshape({3 * D});
  w.qkv = LinearWeight::prepare(qkv_w, qkv_b, compute);
  return w;
}

QkvLinear::QkvLinear(const QkvWeights& w, int64_t rows) : fused_(w.fused()) {
  auto spec = [&](const LinearWeight& lw, int64_t out_stride) {
    LinearSpec s;
    s.rows = rows;
    s.in = lw.in();
    s.out = lw.out();
    s.out_stride = out_stride;
    return s;
  };
  if (fused_) {
    D_ = w.qkv.in();
    qkv_ = Linear(spec(w.qkv, 0), w.qkv);
  } else {  // three matmuls writing the Q, K, V column blocks of one [rows, 3D] buffer
    D_ = w.q.in();
    q_ = Linear(spec(w.q, 3 * D_), w.q);
    k_ = Linear(spec(w.k, 3 * D_), w.k);
    v_ = Linear(spec(w.v, 3 * D_), w.v);
  }
}

void QkvLinear::run(const float* x, float* y) const {
  if (fused_) {
    qkv_.run(x, y);
    return;
  }
  q_.run(x, y);
  k_.run(x, y + D_);
  v_.run(x, y + 2 * D_);
}

}  // namespace dit
