// The normalised rows a transformer block's column linears read (QKV, the feed-forward's fc1),
// shared by DiT and PixArt. With bf16 compute the norm writes them in bf16, rounded to nearest
// even: exactly what those bf16 matmuls would read after converting an f32 norm output, up to
// the norm's own f32 arithmetic (runtime/norm.h), without the f32 rows written, read back and
// converted by every Linear (and tensor parallelism gathers half the bytes).
//
//   Tensor buf = Tensor::empty({B, R, D}, block_input_dtype(compute));
//   BlockInput h = modulated_norm(*tp, ln, x, buf, shift, scale, R > 0);   // [B, T, D]
//   project_and_attend(*qkv_op, attn, h, qkv, out);
#pragma once

#include "runtime/error.h"
#include "runtime/norm.h"
#include "runtime/tensor.h"
#include "runtime/tensor_parallel.h"

namespace dit {

// Rows in one of two types: exactly one pointer is set (both null: this rank has no tokens).
struct BlockInput {
  const float* f32 = nullptr;
  const uint16_t* bf16 = nullptr;
};

// The type of a block's normalised rows for a compute type.
inline DType block_input_dtype(DType compute) { return compute == DType::BF16 ? DType::BF16 : DType::F32; }

// h = LN(x)(1 + scale) + shift on this rank's residual rows [B, R, D] (when it has any), written
// where tensor parallelism wants them and gathered to [B, T, D] (Megatron SP: from every TP
// rank), in buf's type. Every TP rank calls it alike.
inline BlockInput modulated_norm(TensorParallel& tp, const LayerNormModulate& ln, const float* x, Tensor& buf,
                                 const float* shift, const float* scale, bool has_rows) {
  BlockInput h;
  if (buf.dtype() == DType::BF16) {
    uint16_t* rows = tp.gather_buffer(buf.bf16());  // ours, or our shared-memory window
    if (has_rows) ln.run(x, rows, shift, scale);
    h.bf16 = tp.gather(rows);
  } else {
    float* rows = tp.gather_buffer(buf.f32());
    if (has_rows) ln.run(x, rows, shift, scale);
    h.f32 = tp.gather(rows);
  }
  return h;
}

}  // namespace dit
