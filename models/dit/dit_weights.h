// The weights of a DiT transformer, loaded once from a diffusers checkpoint and validated
// (every tensor present with the expected shape). Weights whose dtype is the compute type
// stay in the memory map (models/common/qkv.h says how Q, K and V are projected). Under
// tensor parallelism each rank loads only its shard of the split weights (dit_tp_plan()).
#pragma once

#include <string>
#include <vector>

#include "models/common/qkv.h"
#include "models/common/tp_plan.h"
#include "models/dit/dit_config.h"
#include "runtime/linear.h"
#include "runtime/tensor.h"

namespace dit {

class WeightStore;

// Which DiT weights tensor parallelism splits: attention heads (Q/K/V column-, out row-
// parallel), the MLP (fc1 column, fc2 row) and the adaLN modulation (column-parallel, its
// small output gathered: a third of DiT's weights); the rest is replicated.
const TpPlan& dit_tp_plan();

struct DiTBlockWeights {
  // Conditioning embedder (the converter copies it into every block; each block uses its own).
  LinearWeight t_fc1;   // [D, 256]
  LinearWeight t_fc2;   // [D, D]
  Tensor class_table;   // [num_classes + 1, D] f32
  ShardedLinear ada;    // [6D, D]  -> shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  QkvWeights qkv;       // attn1.to_q, to_k, to_v (this rank's heads)
  ShardedLinear attn_out;  // [D, D]
  ShardedLinear fc1;    // [4D, D]  GELU-tanh
  ShardedLinear fc2;    // [D, 4D]
};

struct DiTWeights {
  DiTConfig cfg;
  DType compute = DType::F32;
  LinearWeight patch;   // pos_embed.proj as a linear over flattened (c, ki, kj) patches: [D, C·p·p]
  std::vector<DiTBlockWeights> blocks;
  LinearWeight final_ada;  // proj_out_1 [2D, D] -> shift, scale
  LinearWeight final_out;  // proj_out_2 [p·p·C_out, D]

  // `tp` says which shard of the split weights this rank holds (all of them with one rank).
  static DiTWeights load(const DiTConfig& cfg, const WeightStore& store, DType compute, QkvProjection qkv,
                         const TensorParallel& tp);
};

}  // namespace dit
