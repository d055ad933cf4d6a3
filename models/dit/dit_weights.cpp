#include "models/dit/dit_weights.h"

#include <cstring>

#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace dit {

namespace {

// Loads "<name>.weight" [out, in] (in the compute type) and "<name>.bias" [out] as a prepared linear weight.
LinearWeight linear(const WeightStore& s, const std::string& name, int64_t out, int64_t in, DType compute) {
  return LinearWeight::prepare(s.get_as(name + ".weight", compute, {out, in}), s.get(name + ".bias", {out}), compute);
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }

}  // namespace

const TpPlan& dit_tp_plan() {
  static const TpPlan plan = {
      {"transformer_blocks.*.attn1.to_q", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn1.to_k", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn1.to_v", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn1.to_out.0", Split::Row, TpUnit::Heads},
      {"transformer_blocks.*.ff.net.0.proj", Split::Column},
      {"transformer_blocks.*.ff.net.2", Split::Row},
      {"transformer_blocks.*.norm1.linear", Split::ColumnGather},
  };
  return plan;
}

DiTWeights DiTWeights::load(const DiTConfig& cfg, const WeightStore& s, DType compute, QkvProjection qkv,
                            const TensorParallel& tp) {
  DiTWeights w;
  w.cfg = cfg;
  w.compute = compute;
  const int64_t D = cfg.hidden(), C = cfg.in_channels, p = cfg.patch;

  Tensor pw = s.get_as("pos_embed.proj.weight", compute, {D, C, p, p});
  w.patch = LinearWeight::prepare(pw.reshape({D, C * p * p}), s.get("pos_embed.proj.bias", {D}), compute);

  // The converter copies the timestep MLP and class table into every block. A block whose
  // copy equals block 0's (byte for byte) uses block 0's, and its pages are given back: DiT-
  // XL/2 holds one 11 MB copy instead of 28 (the same values, so the same results).
  const auto embedder = [&](const std::string& e) {
    return std::vector<Tensor>{s.get(e + "timestep_embedder.linear_1.weight", {D, 256}),
                               s.get(e + "timestep_embedder.linear_1.bias", {D}),
                               s.get(e + "timestep_embedder.linear_2.weight", {D, D}),
                               s.get(e + "timestep_embedder.linear_2.bias", {D}),
                               s.get(e + "class_embedder.embedding_table.weight", {cfg.num_classes + 1, D})};
  };
  const std::vector<Tensor> first = embedder("transformer_blocks.0.norm1.emb.");
  for (int i = 0; i < cfg.layers; ++i) {
    const std::string b = "transformer_blocks." + std::to_string(i) + ".";
    const std::string e = b + "norm1.emb.";
    DiTBlockWeights bw;
    const std::vector<Tensor> mine = embedder(e);
    bool same = i > 0;
    for (size_t k = 0; same && k < mine.size(); ++k)
      same = mine[k].dtype() == first[k].dtype() && std::memcmp(mine[k].data(), first[k].data(), mine[k].nbytes()) == 0;
    if (same) {
      const DiTBlockWeights& b0 = w.blocks[0];
      bw.t_fc1 = b0.t_fc1;
      bw.t_fc2 = b0.t_fc2;
      bw.class_table = b0.class_table;
      for (const Tensor& t : mine) s.drop(t);
    } else {
      bw.t_fc1 = LinearWeight::prepare(s.get_as(e + "timestep_embedder.linear_1.weight", compute, {D, 256}), mine[1], compute);
      bw.t_fc2 = LinearWeight::prepare(s.get_as(e + "timestep_embedder.linear_2.weight", compute, {D, D}), mine[3], compute);
      bw.class_table = as_f32(mine[4]);
    }
    const TpPlan& plan = dit_tp_plan();
    const int64_t hd = cfg.head_dim;
    bw.ada = load_linear(s, b + "norm1.linear", 6 * D, D, compute, plan, tp, hd);
    const std::string a = b + "attn1.";
    bw.qkv = QkvWeights::load(s, a, D, compute, qkv, plan, tp, hd);
    bw.attn_out = load_linear(s, a + "to_out.0", D, D, compute, plan, tp, hd);
    bw.fc1 = load_linear(s, b + "ff.net.0.proj", 4 * D, D, compute, plan, tp, hd);
    bw.fc2 = load_linear(s, b + "ff.net.2", D, 4 * D, compute, plan, tp, hd);
    w.blocks.push_back(std::move(bw));
  }
  w.final_ada = linear(s, "proj_out_1", 2 * D, D, compute);
  w.final_out = linear(s, "proj_out_2", int64_t(p) * p * cfg.out_channels, D, compute);
  return w;
}

}  // namespace dit
