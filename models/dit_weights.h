// The weights of a DiT transformer, loaded once from a diffusers checkpoint and validated
// (every tensor present with the expected shape). f32 weights stay in the memory map;
// Q, K and V are concatenated once into one [3D, D] projection.
#pragma once

#include <string>
#include <vector>

#include "models/dit_config.h"
#include "runtime/linear.h"
#include "runtime/tensor.h"

namespace dit {

class WeightStore;

// How Q, K and V are projected.
//  Fused: one [3D, D] matmul over weights concatenated at load: a private copy of 3·D²
//         weights per block per process (DiT-XL/2: 445 MB f32).
//  Split: three [D, D] matmuls writing the column blocks of one [rows, 3D] buffer, over the
//         checkpoint's weights in place (memory-mapped, shared by every process on the machine).
//  Auto:  Split when the checkpoint's dtype is the compute dtype (the weights are used in
//         place, so they can be shared), else Fused (the weights are converted: a private
//         copy either way). Same results bit for bit; same speed within noise on DiT-XL.
enum class QkvProjection { Auto, Fused, Split };

struct DiTBlockWeights {
  // Conditioning embedder (the converter copies it into every block; each block uses its own).
  LinearWeight t_fc1;   // [D, 256]
  LinearWeight t_fc2;   // [D, D]
  Tensor class_table;   // [num_classes + 1, D] f32
  LinearWeight ada;     // [6D, D]  -> shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp
  LinearWeight qkv;     // [3D, D]  to_q | to_k | to_v (a private copy), or undefined when split:
  LinearWeight q, k, v; // [D, D] each, in place in the memory map (f32), when not fused
  LinearWeight attn_out;// [D, D]
  LinearWeight fc1;     // [4D, D]  GELU-tanh
  LinearWeight fc2;     // [D, 4D]
};

struct DiTWeights {
  DiTConfig cfg;
  DType compute = DType::F32;
  LinearWeight patch;   // pos_embed.proj as a linear over flattened (c, ki, kj) patches: [D, C·p·p]
  std::vector<DiTBlockWeights> blocks;
  LinearWeight final_ada;  // proj_out_1 [2D, D] -> shift, scale
  LinearWeight final_out;  // proj_out_2 [p·p·C_out, D]

  static DiTWeights load(const DiTConfig& cfg, const WeightStore& store, DType compute,
                         QkvProjection qkv = QkvProjection::Auto);
};

// Rows of several [n_i, k] tensors of one dtype stacked into one [sum n_i, k] tensor.
Tensor concat_rows(const std::vector<Tensor>& parts);

}  // namespace dit
