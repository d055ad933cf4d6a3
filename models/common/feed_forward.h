// The transformer block's feed-forward, x += gate ⊙ (GELU-tanh(h·W1ᵀ + b1)·W2ᵀ + b2), shared by
// DiT and PixArt. fc1 is a plain Linear over this rank's token rows (its weight this rank's
// column shard under tensor parallelism); fc2 the block's ParallelLinear (row-parallel: its
// reduction, bias and gated residual).
//
// With bf16 compute the hidden activations [B, T, M] are kept in bf16: fc1 writes them rounded
// to nearest even after its bias and GELU, which is exactly what fc2's bf16 matmul would read
// after converting f32 activations, so x is bit for bit the same, without the f32 round trip
// (fc1 writes half the bytes, and fc2's conversion pass over them is gone).
#pragma once

#include "models/common/block_input.h"
#include "runtime/error.h"
#include "runtime/linear.h"
#include "runtime/tensor_parallel.h"

namespace dit {

// The type of the hidden activations between fc1 and fc2.
inline DType ffn_hidden_dtype(DType compute) { return compute == DType::BF16 ? DType::BF16 : DType::F32; }

// h: [B, T, D] in fc1's input type; hidden: [B, T, M] in ffn_hidden_dtype (fc1's spec.output,
// fc2's spec.input).
inline void run_feed_forward(const Linear& fc1, ParallelLinear& fc2, BlockInput h, Tensor& hidden, float* x,
                             const float* gate) {
  if (hidden.dtype() == DType::BF16) {
    if (h.bf16)
      fc1.run(h.bf16, hidden.bf16());  // GELU-tanh(h·W1ᵀ + b1), rounded to bf16   [B, T, M]
    else
      fc1.run(h.f32, hidden.bf16());
    fc2.run(hidden.bf16(), x, gate);  // x += gate ⊙ (Σ hidden·W2ᵀ + b2)
  } else {
    DIT_CHECK(h.f32, "feed-forward: bf16 rows for an f32 hidden layer");
    fc1.run(h.f32, hidden.f32());
    fc2.run(hidden.f32(), x, gate);
  }
}

}  // namespace dit
