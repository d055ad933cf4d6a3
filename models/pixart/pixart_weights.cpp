#include "models/pixart/pixart_weights.h"

#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace dit {

namespace {

// "<name>.weight" [out, in] (in the compute type) and "<name>.bias" [out] as a prepared linear weight.
LinearWeight linear(const WeightStore& s, const std::string& name, int64_t out, int64_t in, DType compute) {
  return LinearWeight::prepare(s.get_as(name + ".weight", compute, {out, in}), s.get(name + ".bias", {out}), compute);
}

EmbedderWeights embedder(const WeightStore& s, const std::string& name, int64_t out, DType compute) {
  return {linear(s, name + ".linear_1", out, 256, compute), linear(s, name + ".linear_2", out, out, compute)};
}

Tensor as_f32(const Tensor& t) { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }

}  // namespace

const TpPlan& pixart_tp_plan() {
  static const TpPlan plan = {
      {"transformer_blocks.*.attn1.to_q", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn1.to_k", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn1.to_v", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn1.to_out.0", Split::Row, TpUnit::Heads},
      {"transformer_blocks.*.attn2.to_q", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn2.to_k", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn2.to_v", Split::Column, TpUnit::Heads},
      {"transformer_blocks.*.attn2.to_out.0", Split::Row, TpUnit::Heads},
      {"transformer_blocks.*.ff.net.0.proj", Split::Column},
      {"transformer_blocks.*.ff.net.2", Split::Row},
  };
  return plan;
}

PixArtWeights PixArtWeights::load(const PixArtConfig& cfg, const WeightStore& s, DType compute, QkvProjection qkv,
                                  const TensorParallel& tp) {
  PixArtWeights w;
  w.cfg = cfg;
  w.compute = compute;
  const int64_t D = cfg.hidden(), C = cfg.in_channels, p = cfg.patch;

  const Tensor pw = s.get_as("pos_embed.proj.weight", compute, {D, C, p, p});
  w.patch = LinearWeight::prepare(pw.reshape({D, C * p * p}), s.get("pos_embed.proj.bias", {D}), compute);
  const std::string e = "adaln_single.emb.";
  w.t_embed = embedder(s, e + "timestep_embedder", D, compute);
  const bool has_res = s.has(e + "resolution_embedder.linear_1.weight");
  DIT_CHECK(has_res == cfg.use_additional_conditions,
            s.describe() << ": use_additional_conditions is " << (cfg.use_additional_conditions ? "true" : "false")
                         << " in the config but the checkpoint " << (has_res ? "has" : "has no")
                         << " resolution/aspect-ratio embedders (adaln_single.emb.resolution_embedder.*)");
  if (cfg.use_additional_conditions) {
    w.res_embed = embedder(s, e + "resolution_embedder", D / 3, compute);
    w.ar_embed = embedder(s, e + "aspect_ratio_embedder", D / 3, compute);
  }
  w.ada = linear(s, "adaln_single.linear", 6 * D, D, compute);
  w.caption1 = linear(s, "caption_projection.linear_1", D, cfg.caption_channels, compute);
  w.caption2 = linear(s, "caption_projection.linear_2", D, D, compute);

  for (int i = 0; i < cfg.layers; ++i) {
    const std::string b = "transformer_blocks." + std::to_string(i) + ".";
    PixArtBlockWeights bw;
    bw.scale_shift_table = as_f32(s.get(b + "scale_shift_table", {6, D}));
    const TpPlan& plan = pixart_tp_plan();
    const int64_t hd = cfg.head_dim;
    auto shard = [&](const std::string& name, int64_t out, int64_t in) {
      return load_linear(s, b + name, out, in, compute, plan, tp, hd);
    };
    bw.qkv = QkvWeights::load(s, b + "attn1.", D, compute, qkv, plan, tp, hd);
    bw.attn1_out = shard("attn1.to_out.0", D, D);
    bw.q2 = shard("attn2.to_q", D, D).w;
    bw.k2 = shard("attn2.to_k", D, D).w;
    bw.v2 = shard("attn2.to_v", D, D).w;
    bw.attn2_out = shard("attn2.to_out.0", D, D);
    bw.fc1 = shard("ff.net.0.proj", 4 * D, D).w;
    bw.fc2 = shard("ff.net.2", D, 4 * D);
    w.blocks.push_back(std::move(bw));
  }
  w.scale_shift_table = as_f32(s.get("scale_shift_table", {2, D}));
  w.proj_out = linear(s, "proj_out", int64_t(p) * p * cfg.out_channels, D, compute);
  return w;
}

}  // namespace dit
