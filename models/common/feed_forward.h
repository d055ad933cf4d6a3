// The transformer block's feed-forward, x += gate ⊙ (GELU-tanh(h·W1ᵀ + b1)·W2ᵀ + b2), shared by
// DiT and PixArt, asked of the LayerContext (runtime/feed_forward.h), which may share its rows
// among the ranks of a machine. Its local form: fc1 a plain Linear over this rank's token rows
// (its weight this rank's column shard under tensor parallelism), fc2 the block's ParallelLinear
// (row-parallel: its reduction, bias and gated residual).
//
// With bf16 compute the hidden activations [B, T, M] are kept in bf16: fc1 writes them rounded
// to nearest even after its bias and GELU, which is exactly what fc2's bf16 matmul would read
// after converting f32 activations, so x is bit for bit the same, without the f32 round trip
// (fc1 writes half the bytes, and fc2's conversion pass over them is gone).
#pragma once

#include <memory>

#include "models/common/block_input.h"
#include "models/common/patch_grid.h"
#include "models/common/tp_plan.h"
#include "runtime/error.h"
#include "runtime/feed_forward.h"
#include "runtime/parallel_context.h"

namespace dit {

// The type of the hidden activations between fc1 and fc2.
inline DType ffn_hidden_dtype(DType compute) { return compute == DType::BF16 ? DType::BF16 : DType::F32; }

// One block's feed-forward over B × T token rows of width D (M = 4D hidden features in the
// checkpoint): fc1 this rank's column shard, fc2 its row shard; hidden [B, T, M'] in
// ffn_hidden_dtype, shared by the blocks. Every rank asks alike, also one with T = 0.
inline std::unique_ptr<FeedForward> make_block_feed_forward(LayerContext& layers, TensorParallel& tp,
                                                            const LinearWeight& fc1, const ShardedLinear& fc2,
                                                            int64_t B, int64_t T, int64_t D, DType compute,
                                                            const Tensor& hidden) {
  FeedForwardParts p;
  p.shape.batch = B;
  p.shape.rows = T;
  p.shape.dim = D;
  p.shape.hidden_dim = 4 * D;
  p.shape.input = block_input_dtype(compute);
  p.shape.hidden = ffn_hidden_dtype(compute);
  if (fc1.out() == 4 * D && fc2.w.in() == 4 * D) {  // the whole weights (no TP)
    p.w1 = &fc1;
    p.w2 = &fc2.w;
  }
  if (T > 0) {
    p.fc1 = make_linear(fc1, B * T, Act::GeluTanh, p.shape.hidden, p.shape.input);
    p.fc2 = block_linear(tp, fc2, {B, T, 4 * D, D, /*gated=*/true, false, p.shape.hidden});
    p.hidden = hidden;
  }
  return layers.feed_forward(std::move(p));
}

// x += gate ⊙ FF(h), h as the block's norm gave it (both pointers null: no rows here).
inline void run_feed_forward(FeedForward& ff, BlockInput h, float* x, const float* gate) {
  if (h.bf16)
    ff.run(h.bf16, x, gate);
  else
    ff.run(h.f32, x, gate);
}

}  // namespace dit
