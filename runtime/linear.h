// Linear layer y = act(x·Wᵀ + b) on oneDNN matmul, with PyTorch [out, in] weights read in
// place (no copy for f32), fused bias and activation, and optional fused epilogues:
//   gated residual  y += gate[b] ⊙ act(x·Wᵀ + b)   (the adaLN-zero "x + gate·f(x)" of DiT)
//   residual        y += act(x·Wᵀ + b)             (LinearSpec::accumulate, e.g. T5's x + o(a))
//   product         y  = act(x·Wᵀ + b) ⊙ m         (LinearSpec::multiply, m [batch·rows, out],
//                                                   e.g. T5's gelu(x·Wi0ᵀ) ⊙ (x·Wi1ᵀ))
//
//   LinearWeight w = LinearWeight::prepare(store.get("ff.net.0.proj.weight"), bias, DType::F32);
//   LinearSpec spec;
//   spec.batch = 2;  spec.rows = 256;  spec.in = 1152;  spec.out = 4608;  spec.act = Act::GeluTanh;
//   Linear fc1(spec, w);
//   fc1.run(x, h);                       // x [2,256,1152] -> h [2,256,4608]
//
// The primitive is created in the constructor; run() creates nothing and allocates nothing.
// run() rebinds the object's oneDNN memory handles, so one Linear (likewise LayerNormModulate,
// Conv2d, Attention) must not run on two threads at once; distinct objects may.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/packed_source.h"
#include "runtime/tensor.h"

namespace dit {

enum class Act { None, GeluTanh, Silu };

// Weights prepared once for a compute type: f32 weights are used from wherever they live
// (a memory map) without copying; bf16 compute converts them once (or uses bf16 storage
// in place). Shared by every Linear that uses the same weights.
struct LinearWeight {
  Tensor weight;  // [out, in], dtype == compute; undefined when given as row_blocks
  Tensor bias;    // [out] f32, or undefined
  DType compute = DType::F32;
  // Where the weight's packed form is kept (runtime/packed_weights.h): when set, a Linear reads
  // the weight in the matmul's preferred layout from there (mapped, shared by the machine's
  // processes; the same bits) instead of in place. Not with set_weight.
  PackedSource packed;
  // Columns [col_begin, col_begin + cols) of `weight` when cols > 0 (a strided view: a
  // row-parallel shard read from the checkpoint's mapping, packed from there without a private
  // copy, runtime/weight_shard.h); else all of them.
  int64_t col_begin = 0, cols = 0;
  // The weight as blocks of rows stacked, when `weight` is undefined (LinearWeight::stack): e.g.
  // Q, K and V multiplied as one matmul while each stays a view of the checkpoint's mapping.
  // A Linear reads it from its packed entry, made once per machine from the blocks stacked;
  // without one (no cache for it, or an optional directory that failed) it stacks them into
  // a private copy.
  std::vector<Tensor> row_blocks;

  int64_t in() const;
  int64_t out() const;
  int64_t ld() const;        // elements from one output's row to the next
  DType dtype() const;       // of the stored elements (== compute)
  bool defined() const { return weight.defined() || !row_blocks.empty(); }
  const void* data() const;  // the first element of the columns used (weight defined)
  // The same weight with row_blocks stacked into one private `weight`.
  LinearWeight stacked() const;
  static LinearWeight prepare(const Tensor& weight, const Tensor& bias, DType compute);
  // parts ([out_i, in] each, one compute type, all with biases or none) as one weight of their
  // rows stacked, the biases concatenated: row blocks with a packed source of their own where
  // every part has one (nothing copied but the biases), else a private concatenation.
  static LinearWeight stack(const std::vector<LinearWeight>& parts);
};

struct LinearSpec {
  int64_t batch = 1;      // batch elements (each may have its own gate)
  int64_t rows = 1;       // rows (tokens) per batch element
  int64_t in = 0, out = 0;
  Act act = Act::None;
  bool gated_residual = false;  // y += gate ⊙ act(x·Wᵀ + b) instead of y = ...
  // gated_residual only: a plain matmul per batch element, then the gated sum in a pass of its
  // own (what the form gets where oneDNN has only its reference matmul for the post-ops),
  // instead of the gate and the sum as the matmul's post-ops. For comparisons
  // (dit-kernel-bench --gate-after-matmul).
  bool gate_after_matmul = false;
  // Reorder the weights once (constructor) into the layout the matmul prefers for this
  // shape. Costs a private copy of the weights per Linear (no sharing of the mmap); the
  // default (false) reads the [out, in] weights in place, or their shared packed form
  // (LinearWeight::packed).
  bool pack_weights = false;
  // Elements from one output row to the next (0: out). Larger: y is a column block of a
  // wider [batch·rows, out_stride] buffer, e.g. Q, K and V written by three matmuls into
  // one [rows, 3D] buffer with unconcatenated (shared, memory-mapped) weights. Not with
  // gated_residual.
  int64_t out_stride = 0;
  // y += act(x·Wᵀ + b): the result is added to what y holds (a residual). Not with
  // gated_residual.
  bool accumulate = false;
  // y = act(x·Wᵀ + b) ⊙ m, m [batch·rows, out] f32 contiguous, given to run(). Not with
  // gated_residual or accumulate.
  bool multiply = false;
  // bf16 compute only: x given in bf16 (no conversion pass; e.g. the output of a Linear with
  // output BF16), and y written in bf16, rounded to nearest even after the bias and
  // activation (plain form only: not with gated_residual, accumulate or multiply; out_stride
  // counts bf16 elements then). What a bf16 matmul reads is its input rounded this way
  // anyway, so a bf16 y feeding a bf16 Linear gives that Linear's f32-input result bit for bit.
  DType input = DType::F32, output = DType::F32;
};

class Linear {
 public:
  Linear();
  Linear(const LinearSpec& spec, const LinearWeight& w);
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  ~Linear();
  // x: [batch, rows, in] f32 contiguous; y: [batch, rows, out] f32 contiguous;
  // gate: [batch, out] f32 when spec.gated_residual (else ignored);
  // m: [batch·rows, out] f32 when spec.multiply (else ignored).
  void run(const float* x, float* y, const float* gate = nullptr, const float* m = nullptr) const;
  // spec.input BF16: x [batch, rows, in] bf16.
  void run(const uint16_t* x, float* y, const float* gate = nullptr, const float* m = nullptr) const;
  // spec.output BF16: y [batch, rows, out] bf16.
  void run(const float* x, uint16_t* y) const;
  void run(const uint16_t* x, uint16_t* y) const;
  // Points the layer at other weights of the same shape, compute type and bias presence
  // (e.g. the next block's, so that one Linear serves every block of a deep model: one
  // primitive, one scratchpad, one bf16 input buffer). Allocates nothing; the weights must
  // outlive their use. Not with packed weights (pack_weights, LinearWeight::packed).
  void set_weight(const LinearWeight& w);
  const LinearSpec& spec() const;
  double flops() const;  // 2·batch·rows·in·out
  // The oneDNN implementation chosen for the matmul (pd.impl_info_str()), for diagnostics.
  const std::string& impl_info() const;

 private:
  void run_any(const void* x, DType xt, void* y, DType yt, const float* gate, const float* m) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dit
