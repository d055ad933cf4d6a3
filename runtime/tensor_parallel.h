// Tensor parallelism as a model sees it: which shard of a weight this rank holds, and the
// linear layers over those shards (Megatron-LM's column- and row-parallel linears). A model
// asks for them by role and never learns the degree; with one rank every shard is the whole
// weight and every linear a plain Linear (make_serial_tensor_parallel). The distributed
// implementation is parallel/tensor_parallel.h, over the mesh's tp group (the transformer) or
// mp group (a text encoder spread over every model-parallel rank of a guidance half).
//
//   Column:        y[:, shard] = act(x·W[shard]ᵀ + b[shard])                 no communication
//   ColumnGather:  y = all-gather over the ranks of Column's y               (small outputs)
//   Row:           v = Σ_ranks x[:, shard]·W[:, shard]ᵀ (all-reduce), then + b, then the
//                  epilogue: y = v, y += v (residual) or y += gate ⊙ v (gated residual)
//   Replicated:    y = act(x·Wᵀ + b) on every rank
//
// Megatron sequence parallelism (on when this rank's tokens × batch reach sp_min_tokens): the
// residual stream between the tensor-parallel regions is split over the TP ranks by tokens —
// Row reduce-scatters instead of all-reducing, norms and residuals run on the shard, and
// gather() all-gathers the normalised rows before the next Column linears. Same results
// within rounding (the partial sums are added in another order).
//
//   auto tp = ctx.layers().tensor_parallel(TpScope::Transformer);
//   TokenRange heads = tp->shard(H, 1);                        // this rank's attention heads
//   tp->prepare(B, tokens, D);                                 // per shape: Megatron SP or not
//   LinearSpec s1;  s1.rows = B * T;  s1.in = D;  s1.out = 4 * D;  s1.act = Act::GeluTanh;
//   LinearSpec s2;  s2.batch = B;  s2.rows = T;  s2.in = 4 * D;  s2.out = D;  s2.gated_residual = true;
//   auto fc1 = tp->linear(Split::Column, s1, w1_shard);    // w1_shard = shard_rows(w1, b1, f32, tp->shard(4 * D, 1))
//   auto fc2 = tp->linear(Split::Row, s2, w2_shard);       // w2_shard = shard_cols(w2, b2, f32, tp->shard(4 * D, 1))
//   float* h = tp->gather_buffer(own);                          // [batch, residual rows, D]
//   norm(x_residual, h);  fc1->run(tp->gather(h), m);  fc2->run(m, x_residual, gate);
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/linear.h"
#include "runtime/token_split.h"

namespace dit {

enum class Split { Replicated, Column, ColumnGather, Row };

class ParallelLinear {
 public:
  virtual ~ParallelLinear() = default;
  // Column / ColumnGather / Replicated: x [batch, rows, in]; y [batch, rows, out_local()]
  // (Column) or [batch, rows, out] (the others), with the spec's activation.
  // Row: x [batch, rows, in_local]; y [batch, residual rows, out] receives the spec's epilogue
  // (gated_residual: gate [batch, out]; accumulate; or plain) after the reduction.
  virtual void run(const float* x, float* y, const float* gate = nullptr) = 0;
  // The same with x in bf16 (spec.input BF16: e.g. the bf16 output of the MLP's first linear).
  virtual void run(const uint16_t* x, float* y, const float* gate = nullptr) = 0;
  virtual int64_t out_local() const = 0;
};

class TensorParallel {
 public:
  virtual ~TensorParallel() = default;
  // This rank's [begin, end) of `dim` features split in whole units of `unit` features
  // (head_dim for attention heads; 1 for MLP columns). The whole range with one rank.
  virtual TokenRange shard(int64_t dim, int64_t unit) const = 0;
  // Once per shape: `batch` sequences of which this rank's attention covers `tokens` (global
  // token indices), `dim` wide. Chooses Megatron SP or not, sizes gather()'s buffer.
  virtual void prepare(int64_t batch, TokenRange tokens, int64_t dim) = 0;
  // The rows of the residual stream this rank holds (global token indices): all of the
  // prepared tokens, or its share of them under Megatron SP.
  virtual TokenRange residual() const = 0;
  // [batch, residual rows, dim] -> [batch, tokens, dim]: an all-gather over the TP ranks under
  // Megatron SP; otherwise `rows` itself (no copy). In f32, or bf16 (a norm's output for bf16
  // linears: half the bytes to move).
  virtual const float* gather(const float* rows) = 0;
  virtual const uint16_t* gather(const uint16_t* rows) = 0;
  // Where to write the rows the next gather() takes ([batch, residual rows, dim]): `own` (the
  // caller's buffer), or under Megatron SP on one machine the rank's shared-memory window,
  // which the other ranks read in place (one copy of the rows fewer). Every call must be
  // followed by gather() of the pointer it returned, of the same type, on every TP rank alike.
  virtual float* gather_buffer(float* own) = 0;
  virtual uint16_t* gather_buffer(uint16_t* own) = 0;
  // The layer's full shape in `spec` (in, out; rows = the prepared tokens, or the batch for a
  // per-sequence linear), `shard` the rank's part of the weight: rows shard(out) for Column
  // and ColumnGather, columns shard(in) for Row (its bias whole), all of it for Replicated.
  virtual std::unique_ptr<ParallelLinear> linear(Split split, const LinearSpec& spec, const LinearWeight& shard) = 0;
  // Sum over the ranks, in place (the vocab-parallel embedding of a text encoder).
  virtual void all_reduce(float* data, int64_t n) = 0;
  // A line naming this rank's shards for the layout printout ("" with one rank).
  virtual std::string describe(int64_t heads, int64_t ffn) const = 0;
};

// One rank: whole shards, plain Linear layers, no communication.
std::unique_ptr<TensorParallel> make_serial_tensor_parallel();

// A plain Linear whose spec may ask for the Row epilogue (used by the serial implementation
// and the distributed Replicated split).
std::unique_ptr<ParallelLinear> make_local_linear(const LinearSpec& spec, const LinearWeight& w);

}  // namespace dit
