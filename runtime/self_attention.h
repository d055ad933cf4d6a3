// The attention interface a transformer block calls. The block hands over the packed
// Q, K, V of the tokens it holds and gets their attention output; whether the other
// tokens live in this process (LocalSelfAttention) or on other ranks (Ulysses, Ring,
// USP in parallel/) is the implementation's business, not the model's.
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
  virtual void forward(const float* qkv, float* out) = 0;
  virtual const char* name() const = 0;
};

// Attention over tokens that all live in this process.
std::unique_ptr<SelfAttention> make_local_self_attention();

}  // namespace dit
