// The attention roles a transformer block calls. A block hands over the projections of the
// tokens it holds and gets their attention output; whether the other tokens live in this
// process or on other ranks is the implementation's business (runtime/parallel_context.h's
// LayerContext chooses it), not the model's.
//
//  - SelfAttention: the image tokens attend to each other. The tokens are split over the
//    ranks of a sequence-parallel group: local here, Ulysses / Ring / USP in parallel/.
//  - CrossAttention: this rank's image tokens (queries) attend to text tokens (keys, values)
//    that every rank holds in full, with an additive key bias for the padding mask. Local on
//    every rank in every layout: no communication.
//  - (Joint attention for SD3/Flux — image tokens split, a replicated text prefix attending
//    and attended to as one sequence — is the next role; it will be one more interface here
//    and one more LayerContext method.)
#pragma once

#include <memory>

#include "runtime/tensor.h"

namespace dit {

struct SelfAttentionShape {
  int64_t batch = 1;         // sequences (e.g. 2 for [cond, uncond])
  int64_t local_tokens = 0;  // tokens held by this process
  int64_t total_tokens = 0;  // the whole sequence, over all ranks (0: local_tokens)
  int64_t heads = 1, head_dim = 1;
  DType compute = DType::F32;
};

class SelfAttention {
 public:
  virtual ~SelfAttention() = default;
  // Called once per shape before the denoising loop: buffers, primitives, plans.
  virtual void prepare(const SelfAttentionShape& s) = 0;
  // qkv: [batch, local_tokens, 3, heads, head_dim]; out: [batch, local_tokens, heads, head_dim].
  // With compute bf16, out's values may already be rounded to bf16 (to nearest even): what it
  // feeds is a bf16 matmul (the output projection), whose input rounding then changes nothing.
  virtual void forward(const float* qkv, float* out) = 0;
  // The type forward() may take qkv in, once prepared: BF16 where the implementation reads
  // bf16 q, k, v (bf16 compute: local attention, the ring, Ulysses exchanging bf16), so the
  // QKV projection can write them rounded (half the bytes, and no conversion pass: the same
  // bits, as the kernels round their inputs to bf16 anyway); else F32.
  virtual DType qkv_dtype() const { return DType::F32; }
  // qkv in bf16, as above; only where qkv_dtype() is BF16.
  virtual void forward(const uint16_t* qkv, float* out);
  // The type forward() may write out in, once prepared: BF16 where the implementation rounds
  // its output itself (bf16 compute, local attention), so that the output projection reads
  // it as it is (the bits of converting the f32 output: a bf16 matmul rounds its input so);
  // else F32.
  virtual DType out_dtype() const { return DType::F32; }
  // qkv and out in bf16; only where qkv_dtype() and out_dtype() are BF16.
  virtual void forward(const uint16_t* qkv, uint16_t* out);
  // Where the caller may write the next forward()'s qkv instead of its own buffer, or null:
  // room for [batch, local_tokens, 3, heads, head_dim] in qkv_dtype(), valid until that
  // forward() returns, which must then be given this pointer. Ulysses on one machine hands
  // out its shared-memory window, so that the QKV projection writes where the other ranks
  // read (docs/transport.md, "Windows"). Call it just before the projection: it may wait
  // until the other ranks have finished reading this rank's last output.
  virtual void* qkv_destination() { return nullptr; }
  virtual const char* name() const = 0;
};

// Attention over tokens that all live in this process.
std::unique_ptr<SelfAttention> make_local_self_attention();

struct CrossAttentionShape {
  int64_t batch = 1;
  int64_t q_tokens = 0;   // this rank's image tokens
  int64_t kv_tokens = 0;  // text tokens (the same on every rank)
  int64_t heads = 1, head_dim = 1;
  DType compute = DType::F32;
};

class CrossAttention {
 public:
  virtual ~CrossAttention() = default;
  // Attends to all kv_tokens keys.
  virtual void prepare(const CrossAttentionShape& s) = 0;
  // From the next forward() on, only keys [0, kv_used) of each item (1 <= kv_used <= kv_tokens):
  // the caller's word that the rest weigh nothing, e.g. text padding past every item's last
  // unmasked token (its logits carry -10000, so its weight exp(s - 10000 - max) is 0 in f32).
  // Inputs keep their kv_tokens layout. Per request, outside the denoising loop: it may create
  // primitives. kv_used = kv_tokens attends to all again.
  virtual void use_keys(int64_t kv_used) = 0;
  // q: [batch, q_tokens, heads, head_dim]; k, v: [batch, kv_tokens, heads, head_dim];
  // key_bias: [batch, kv_tokens] added to the scaled logits (0 keep, -10000 padding), or null;
  // out: [batch, q_tokens, heads, head_dim].
  virtual void forward(const float* q, const float* k, const float* v, const float* key_bias, float* out) = 0;
  // The type forward() may take q, k, v and write out in, once prepared: BF16 with bf16
  // compute (the projections write them rounded, the output projection reads out as it is:
  // the same bits, as the kernels and the matmul round them so anyway), else F32.
  virtual DType io_dtype() const { return DType::F32; }
  // q, k, v and out in bf16; only where io_dtype() is BF16.
  virtual void forward(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* key_bias,
                       uint16_t* out);
};

// Cross-attention computed where the queries are (the only implementation every layout needs).
std::unique_ptr<CrossAttention> make_local_cross_attention();

}  // namespace dit
