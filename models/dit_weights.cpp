#include "models/dit_weights.h"

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

// Loads "<name>.weight" [out, in] and "<name>.bias" [out] as a prepared linear weight.
LinearWeight linear(const WeightStore& s, const std::string& name, int64_t out, int64_t in, DType compute) {
  return LinearWeight::prepare(s.get(name + ".weight", {out, in}), s.get(name + ".bias", {out}), compute);
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }

}  // namespace

DiTWeights DiTWeights::load(const DiTConfig& cfg, const WeightStore& s, DType compute, QkvProjection qkv) {
  DiTWeights w;
  w.cfg = cfg;
  w.compute = compute;
  const int64_t D = cfg.hidden(), C = cfg.in_channels, p = cfg.patch;

  Tensor pw = s.get("pos_embed.proj.weight", {D, C, p, p});
  w.patch = LinearWeight::prepare(pw.reshape({D, C * p * p}), s.get("pos_embed.proj.bias", {D}), compute);

  for (int i = 0; i < cfg.layers; ++i) {
    const std::string b = "transformer_blocks." + std::to_string(i) + ".";
    const std::string e = b + "norm1.emb.";
    DiTBlockWeights bw;
    bw.t_fc1 = linear(s, e + "timestep_embedder.linear_1", D, 256, compute);
    bw.t_fc2 = linear(s, e + "timestep_embedder.linear_2", D, D, compute);
    bw.class_table = as_f32(s.get(e + "class_embedder.embedding_table.weight", {cfg.num_classes + 1, D}));
    bw.ada = linear(s, b + "norm1.linear", 6 * D, D, compute);
    const std::string a = b + "attn1.";
    const bool fuse = qkv == QkvProjection::Fused ||
                      (qkv == QkvProjection::Auto && s.get(a + "to_q.weight", {D, D}).dtype() != compute);
    if (!fuse) {
      bw.q = linear(s, a + "to_q", D, D, compute);
      bw.k = linear(s, a + "to_k", D, D, compute);
      bw.v = linear(s, a + "to_v", D, D, compute);
    } else {
    Tensor qkv_w = concat_rows({s.get(a + "to_q.weight", {D, D}), s.get(a + "to_k.weight", {D, D}),
                                s.get(a + "to_v.weight", {D, D})});
    Tensor qkv_b = concat_rows({as_f32(s.get(a + "to_q.bias", {D})).reshape({1, D}),
                                as_f32(s.get(a + "to_k.bias", {D})).reshape({1, D}),
                                as_f32(s.get(a + "to_v.bias", {D})).reshape({1, D})})
                       .reshape({3 * D});
    bw.qkv = LinearWeight::prepare(qkv_w, qkv_b, compute);
    }
    bw.attn_out = linear(s, a + "to_out.0", D, D, compute);
    bw.fc1 = linear(s, b + "ff.net.0.proj", 4 * D, D, compute);
    bw.fc2 = linear(s, b + "ff.net.2", D, 4 * D, compute);
    w.blocks.push_back(std::move(bw));
  }
  w.final_ada = linear(s, "proj_out_1", 2 * D, D, compute);
  w.final_out = linear(s, "proj_out_2", int64_t(p) * p * cfg.out_channels, D, compute);
  return w;
}

}  // namespace dit
