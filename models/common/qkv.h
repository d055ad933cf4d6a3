// The Q, K, V projection of a self-attention layer (to_q, to_k, to_v with biases), shared by
// every diffusion transformer family: weights loaded once, an op writing [rows, 3, H, d].
//
//   QkvWeights w = QkvWeights::load(store, "transformer_blocks.0.attn1.", D, DType::F32, QkvProjection::Auto,
//                                   plan, *tp, head_dim);   // this rank's heads under tensor parallelism
//   QkvLinear op(w, rows);            // primitives (once per shape); QkvLinear(w, rows, DType::BF16): bf16 q, k, v
//   op.run(h, qkv);                   // h [rows, D] -> qkv [rows, 3D]: q | k | v per row
//
// A block asks its LayerContext for the projection (make_block_qkv), whose local form is a
// QkvLinear and which may share its rows among the ranks of a machine (runtime/projection.h).
#pragma once

#include <string>
#include <vector>

#include "models/common/block_input.h"
#include "models/common/tp_plan.h"
#include "runtime/attention_roles.h"
#include "runtime/linear.h"
#include "runtime/parallel_context.h"
#include "runtime/projection.h"
#include "runtime/tensor.h"
#include "runtime/tensor_parallel.h"

namespace dit {

class WeightStore;

// How Q, K and V are projected.
//  Fused: one [3D, D] matmul. Where the weights are packed in the weight cache
//         (runtime/packed_weights.h) its weight is the three tensors' rows stacked in one
//         entry, mapped and shared by the machine's processes; else a private concatenation
//         made at load (3·D² weights per block per process: DiT-XL/2 445 MB f32).
//  Split: three [D, D] matmuls writing the column blocks of one [rows, 3D] buffer, over the
//         checkpoint's weights (or their packed entries). oneDNN 2.6 serves a strided output
//         with gemm:jit rather than its brgemm kernels: about 15% slower at 512 rows on the
//         2-core VM, the same at 2048 (docs/benchmarks.md).
//  Auto:  Fused, except where the weights are read in place and cannot be packed (no weight
//         cache): then Split, so that they stay shared. Same results bit for bit.
enum class QkvProjection { Auto, Fused, Split };

struct QkvWeights {
  // [3D, D] to_q | to_k | to_v (row blocks read from one packed entry, or a private copy), or
  // undefined when split:
  LinearWeight qkv;
  LinearWeight q, k, v;  // [D, D] each, in place in the memory map, when not fused
  bool fused() const { return qkv.defined(); }
  // Output features per projection (this rank's heads × head_dim).
  int64_t out() const { return fused() ? qkv.out() / 3 : q.out(); }
  // Loads <prefix>to_q/to_k/to_v .weight [D, D] and .bias [D]: the rows of this rank's heads
  // when the plan splits them (column-parallel), else all.
  static QkvWeights load(const WeightStore& s, const std::string& prefix, int64_t D, DType compute,
                         QkvProjection how, const TpPlan& plan, const TensorParallel& tp, int64_t head_dim);
};

class QkvLinear {
 public:
  QkvLinear() = default;
  // output: the type of q, k, v (BF16 with bf16 compute only: rounded to nearest even after
  // the bias, as the attention kernels round them; SelfAttention::qkv_dtype says which).
  // input: the type of x (BF16 with bf16 compute only: e.g. a norm's bf16 output, which the
  // matmuls read as it is).
  QkvLinear(const QkvWeights& w, int64_t rows, DType output = DType::F32, DType input = DType::F32);
  // x [rows, D] -> y [rows, 3·out()]: q | k | v of this rank's heads, in the output type.
  void run(const float* x, float* y) const;
  void run(const float* x, uint16_t* y) const;
  void run(const uint16_t* x, float* y) const;
  void run(const uint16_t* x, uint16_t* y) const;

 private:
  template <class X, class Y>
  void run_any(const X* x, Y* y) const;
  template <class X, class Y>
  void run_split(const X* x, Y* y) const;
  Linear qkv_, q_, k_, v_;
  int64_t D_ = 0;
  bool fused_ = false;
  DType output_ = DType::F32, input_ = DType::F32;
  // Split with bf16 compute and an f32 x: x rounded to bf16 once for the three matmuls (each would
  // otherwise convert it itself; the same bits either way).
  mutable Tensor xb_;
};

// A block's Q, K, V projection over B × T rows of width D, as `layers` gives it (every rank
// alike, also one with T = 0): its local form a QkvLinear (output and input as QkvLinear's),
// the whole weights offered for sharing where this rank holds every head.
std::unique_ptr<Projection> make_block_qkv(LayerContext& layers, const QkvWeights& w, int64_t B, int64_t T,
                                           int64_t D, DType output, DType input);

// A block's self-attention after its norm, shared by the families: q, k, v = h·W + b into qkv
// ([B, T, 3, H', d] in attn.qkv_dtype(): bf16 where the attention reads bf16, so the projection
// writes half the bytes and the attention converts nothing; the same bits), then out [B, T, H',
// d] = attention (which may talk to other ranks), in attn.out_dtype(). With no tokens here
// (T = 0) the projection computes nothing of its own and the attention nothing but its share:
// a rank without tokens still takes part in both (either may be shared with other ranks).
// h is in the op's input type (QkvLinear's input).
void project_and_attend(Projection& op, SelfAttention& attn, BlockInput h, Tensor& qkv, Tensor& out);

// x += gate ⊙ (out·Woᵀ + bo) (or the op's epilogue), out in the attention's output type (the
// op's input type).
void attention_output(ParallelLinear& op, const Tensor& out, float* x, const float* gate = nullptr);

}  // namespace dit
