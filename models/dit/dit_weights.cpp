#include "models/dit/dit_weights.h"

#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace dit {

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
    bw.qkv = QkvWeights::load(s, a, D, compute, qkv);
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
