// A transformer block's feed-forward over this rank's token rows, as a model asks its
// LayerContext for it (runtime/parallel_context.h), one per block:
//
//   x += gate ⊙ (GELU-tanh(h·W1ᵀ + b1)·W2ᵀ + b2)        h, x [batch, rows, dim], gate [batch, dim]
//
//   FeedForwardParts p;
//   p.shape = {B, T, D, M, input, hidden};   p.w1 = &w1;  p.w2 = &w2;    // whole weights (no TP)
//   p.fc1 = make_linear(w1, B * T, Act::GeluTanh, hidden, input);      // the local form's linears
//   p.fc2 = block_linear(tp, w2_shard, {B, T, M, D, /*gated=*/true, false, hidden});
//   p.hidden = mlp;                                                      // [B, T, M'], shared by the blocks
//   auto ff = ctx.layers().feed_forward(std::move(p));
//   ff->run(h, x, gate);     // every rank of the model alike, also one without rows (T = 0)
//
// The local form (make_local_feed_forward) runs fc1 over all rows into `hidden`, then fc2 with
// its gated residual. Where the ranks of a replica share a machine's memory, the distributed
// context may instead share the rows' blocks among them (parallel/shared_feed_forward.h): a rank
// that has finished its own rows computes some of a slower rank's, with linears of its own over
// the same whole weights. Each row's result is the same whoever computes it.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/linear.h"
#include "runtime/tensor.h"
#include "runtime/tensor_parallel.h"

namespace dit {

struct FeedForwardShape {
  int64_t batch = 1, rows = 0;  // this rank's token rows per batch element (0: none)
  int64_t dim = 0, hidden_dim = 0;  // D and the whole M (W1 [M, D], W2 [D, M])
  DType input = DType::F32;    // h's type
  DType hidden = DType::F32;   // the activations between the linears
};

struct FeedForwardParts {
  FeedForwardShape shape;
  // The whole weights with their compute type, when this rank holds all of them (no tensor
  // parallelism): what a form running blocks of rows with linears of its own needs. Must
  // outlive the feed-forward. Null otherwise.
  const LinearWeight* w1 = nullptr;
  const LinearWeight* w2 = nullptr;
  // The local form's layers over all of this rank's rows (absent when rows == 0): fc1 with the
  // GELU and output `hidden`, fc2 the block's ParallelLinear with the gated residual.
  Linear fc1;
  std::unique_ptr<ParallelLinear> fc2;
  Tensor hidden;  // [batch, rows, M'] in shape.hidden: fc1's output (shared by the blocks)
};

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // h [batch, rows, dim] in shape.input (null with no rows); x [batch, rows, dim] f32, updated;
  // gate [batch, dim] f32.
  virtual void run(const float* h, float* x, const float* gate) = 0;
  virtual void run(const uint16_t* h, float* x, const float* gate) = 0;
};

// fc1 over every row, then fc2 (with bf16 hidden activations: fc1 writes them rounded, which is
// what fc2's bf16 matmul would read anyway). Nothing with no rows.
std::unique_ptr<FeedForward> make_local_feed_forward(FeedForwardParts parts);

}  // namespace dit
