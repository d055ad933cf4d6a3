// T5 v1.1 encoder forward pass (transformers T5EncoderModel(ids, attention_mask).last_hidden_state),
// the exact order of operations of docs/t5.md:
//
//   h = embedding[ids]                                   (no scaling)
//   per block: h += o(attn(rms(h))),  h += wo(gelu_new(wi_0 x) ⊙ wi_1 x) with x = rms(h)
//   out = rms(h, final_layer_norm)                       (all L positions, padded ones too)
//
// attention: softmax(q·kᵀ + rel_bias[bucket(j - i)] + (1 - mask[j])·finfo(f32).min)·v, no
// 1/sqrt(d_kv), block 0's relative bias reused by every block.
//
//   auto w = std::make_shared<T5Weights>(T5Weights::load(dir + "/text_encoder", DType::F32));
//   T5Encoder enc(w);
//   enc.prepare(2, 300);                          // primitives and buffers, once
//   enc.encode(ids, mask, out);                   // [2, 300] int64 each -> [2, 300, d_model] f32
//
// encode() allocates nothing and creates no primitive. Like the other kernels' objects, one
// encoder must not run on two threads at once.
#pragma once

#include <memory>

#include "models/t5/t5_weights.h"
#include "runtime/linear.h"
#include "runtime/tensor_parallel.h"

namespace dit {

class T5Encoder {
 public:
  // `tp`: the tensor parallelism the weights were loaded for (T5Weights::load); null: one rank.
  // Under TP the encoder runs its heads and d_ff columns; o and wo all-reduce their partial
  // sums and the vocab-parallel embedding all-reduces the rows each rank looked up.
  explicit T5Encoder(std::shared_ptr<const T5Weights> w, std::shared_ptr<TensorParallel> tp = nullptr);
  T5Encoder(T5Encoder&&) noexcept;
  T5Encoder& operator=(T5Encoder&&) noexcept;
  ~T5Encoder();

  // Creates every primitive and buffer for `batch` sequences of `seq_len` tokens.
  void prepare(int64_t batch, int64_t seq_len);
  // ids, mask: [batch, seq_len] (mask values 0 or 1); out: [batch, seq_len, d_model] f32.
  // An id outside 0..vocab_size-1 or a mask value other than 0/1 throws dit::Error.
  void encode(const int64_t* ids, const int64_t* mask, float* out);

  int64_t batch() const;
  int64_t seq_len() const;
  const T5Weights& weights() const;
  // FLOPs of one encode at the prepared shape: every matmul (2·m·k·n) and attention
  // (4·batch·heads·L²·d_kv); norms and element-wise work not counted.
  double flops() const;
  // Gives back the resident pages of the memory-mapped weights (T5Weights::drop_pages);
  // the encoder stays usable (pages fault back in on the next encode).
  size_t drop_resident_pages() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dit
