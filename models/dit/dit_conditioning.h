// DiT's conditioning path (docs/dit.md "Conditioning", "Block", "Final layer"): for block l
//   c_l = SiLU(TimestepEmbedding_l(t) + class_table_l[y])                   [B, D]
//   shift/scale/gate of attention and MLP = c_l·W_ada,lᵀ + b_ada,l          [B, 6D]
// and for the final layer shift, scale = c_0·W_outᵀ + b                     [B, 2D].
// It depends on the timestep and the class alone. Computed per step it reads every block's
// adaLN weights (32 MB a block in DiT-XL, 1 GB a step over 28 blocks) for B rows, a
// matrix-vector product at memory speed. Here it is computed for a window of W steps of the
// schedule at once (W·B rows, at most kMaxRows): the weights are read once per window.
//
//   DiTConditioning cond;
//   cond.prepare(weights, batch, tp);        // with the model's shape
//   cond.begin(class_ids, schedule);         // per request: classes, the timesteps to come
//   cond.select(t);                          // each step: t [batch]; computes its window when new
//   cond.block_chunk(l, k), cond.final_chunk(k)   // [batch, D] each
//
// A timestep outside the schedule (a caller that gave none) gets a window of its own; the
// results are the same either way (the same per-row arithmetic).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/dit/dit_weights.h"
#include "runtime/linear.h"
#include "runtime/tensor.h"
#include "runtime/tensor_parallel.h"

namespace dit {

class DiTConditioning {
 public:
  // Rows (steps × batch) computed together at most: enough to read the weights once for many
  // steps, few enough that the window's modulation (rows · (layers·6 + 2)·D floats: 25 MB for
  // DiT-XL) stays small.
  static constexpr int64_t kMaxRows = 32;

  // The model's weights (kept by reference: they must outlive this) and its batch; `tp` makes
  // the adaLN linears (column-parallel, gathered, under tensor parallelism).
  void prepare(const DiTWeights& w, int64_t batch, TensorParallel& tp);
  // class_ids [batch] (checked by the caller); schedule: the timesteps select() will be called
  // with, in order (may be empty). Sizes the window and creates its primitives when it changes.
  void begin(const std::vector<int64_t>& class_ids, const std::vector<double>& schedule);
  // Makes the modulation for t [batch] current: from the window that holds it, else computes
  // the window starting at its place in the schedule, else a window of t alone. Allocates nothing.
  void select(const double* t);
  // Modulation chunk k of block l for the current step, [batch, D] contiguous:
  // 0 shift_msa, 1 scale_msa, 2 gate_msa, 3 shift_mlp, 4 scale_mlp, 5 gate_mlp.
  const float* block_chunk(size_t l, int k) const;
  // The final layer's: 0 shift, 1 scale.  [batch, D]
  const float* final_chunk(int k) const;
  int64_t window_steps() const { return W_; }
  int64_t windows_computed() const { return computed_; }  // how often the weights were read

 private:
  void create(int64_t steps);  // primitives and buffers for windows of `steps` steps
  void compute();  // the window of times_
  bool same_embedder(size_t l) const;  // block l shares block 0's timestep MLP and class table

  const DiTWeights* w_ = nullptr;
  TensorParallel* tp_ = nullptr;
  int64_t B_ = 0, D_ = 0, W_ = 0;  // batch, hidden, steps per window
  std::vector<int64_t> y_;         // class id per batch row
  std::vector<double> schedule_;
  std::vector<double> times_;      // the current window's timestep per row, row (slot, b) = slot·B + b [W·B] (NaN: none)
  int64_t slot_ = 0;               // the current step's slot in the window
  int64_t computed_ = 0;

  struct BlockOps {
    Linear t_fc1, t_fc2;
    std::unique_ptr<ParallelLinear> ada;
  };
  std::vector<BlockOps> ops_;
  Linear final_ada_;

  Tensor tfreq_;   // [W·B, 256] sinusoidal features
  Tensor temb_;    // [W·B, D]
  Tensor c0_;      // [W·B, D]  SiLU(c_0): block 0's (and the final layer's, and every block's sharing its embedder)
  Tensor c_;       // [W·B, D]  SiLU(c_l) of a block with its own embedder
  Tensor mod_;     // [W·B, 6D] adaLN output (the final layer's uses [W·B, 2D] of it)
  Tensor chunks_;  // [W, layers, 6, B, D]
  Tensor final_;   // [W, 2, B, D]
};

}  // namespace dit
