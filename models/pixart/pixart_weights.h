// The weights of a PixArt transformer (docs/pixart.md), loaded once from a diffusers
// checkpoint and validated (every tensor present with the expected shape). Weights whose
// dtype is the compute type stay in the memory map.
#pragma once

#include <vector>

#include "models/common/qkv.h"
#include "models/common/tp_plan.h"
#include "models/pixart/pixart_config.h"
#include "runtime/linear.h"
#include "runtime/tensor.h"

namespace dit {

class WeightStore;

// Which PixArt weights tensor parallelism splits: both attentions' heads (Q/K/V column-, out
// row-parallel) and the MLP (fc1 column, fc2 row); the rest (embedders, adaLN-single, caption
// projection, final layer: about 2% of the weights) is replicated.
const TpPlan& pixart_tp_plan();

// timestep / resolution / aspect-ratio embedder: linear_1 (256 -> n), SiLU, linear_2 (n -> n).
struct EmbedderWeights {
  LinearWeight fc1, fc2;
};

struct PixArtBlockWeights {
  Tensor scale_shift_table;  // [6, D] f32: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  QkvWeights qkv;            // attn1.to_q, to_k, to_v (this rank's heads)
  ShardedLinear attn1_out;   // [D, D]
  LinearWeight q2, k2, v2;   // attn2.to_q, to_k, to_v [D', D] (k2, v2 read the projected caption)
  ShardedLinear attn2_out;   // [D, D]
  LinearWeight fc1;          // ff.net.0.proj [4D, D], GELU-tanh (this rank's columns)
  ShardedLinear fc2;         // ff.net.2 [D, 4D]
};

struct PixArtWeights {
  PixArtConfig cfg;
  DType compute = DType::F32;
  LinearWeight patch;             // pos_embed.proj as a linear over (c, ki, kj) patches: [D, C·p·p]
  EmbedderWeights t_embed;        // adaln_single.emb.timestep_embedder (256 -> D)
  EmbedderWeights res_embed, ar_embed;  // resolution / aspect_ratio embedders (256 -> D/3), α-1024 only
  LinearWeight ada;               // adaln_single.linear [6D, D]
  LinearWeight caption1, caption2;  // caption_projection.linear_1 [D, caption_channels], linear_2 [D, D]
  std::vector<PixArtBlockWeights> blocks;
  Tensor scale_shift_table;       // [2, D] f32: final shift, scale
  LinearWeight proj_out;          // [p·p·C_out, D]

  // `tp` says which shard of the split weights this rank holds (all of them with one rank).
  static PixArtWeights load(const PixArtConfig& cfg, const WeightStore& store, DType compute, QkvProjection qkv,
                            const TensorParallel& tp);
};

}  // namespace dit
