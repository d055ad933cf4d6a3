// The weights of a T5 v1.1 encoder (transformers T5EncoderModel), loaded from a
// text_encoder/ directory: config.json + model.safetensors, or model.safetensors.index.json
// + model-0000i-of-0000K.safetensors. Every tensor is checked for presence and shape.
//
//   auto w = T5Weights::load(dir + "/text_encoder", DType::F32);
//
// Storage: F32, BF16 or F16 per tensor (whatever the files hold; config.json's torch_dtype
// is ignored). Linear weights whose stored type is the compute type are used in place from
// the read-only memory map (no private copy: processes on one machine share the pages);
// others are converted once (a private copy). The embedding table stays in the map too
// (F32/BF16; rows are widened to f32 on lookup); F16 tensors are converted to f32 at load.
// Norm weights and the relative-position table are small and kept as f32.
#pragma once

#include <string>
#include <vector>

#include "models/t5/t5_config.h"
#include "runtime/linear.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

namespace dit {

struct T5LayerWeights {
  Tensor ln_attn;  // layer.0.layer_norm.weight [d_model] f32
  LinearWeight q, k, v;  // [inner, d_model]
  LinearWeight o;        // [d_model, inner]
  Tensor ln_ff;    // layer.1.layer_norm.weight [d_model] f32
  LinearWeight wi0, wi1;  // [d_ff, d_model]  (wi_0 goes through gelu_new)
  LinearWeight wo;        // [d_model, d_ff]
};

struct T5Weights {
  T5Config cfg;
  DType compute = DType::F32;
  Tensor embedding;      // [vocab_size, d_model] F32 or BF16 (shared.weight or encoder.embed_tokens.weight)
  Tensor rel_bias;       // [num_buckets, num_heads] f32, block 0's relative_attention_bias
  std::vector<T5LayerWeights> layers;
  Tensor final_ln;       // [d_model] f32
  WeightStore store;     // the mapped files

  // dir: the text_encoder directory (config.json and the safetensors files).
  static T5Weights load(const std::string& dir, DType compute);
  // Drops the mapped files' resident pages (WeightStore::drop_pages): RSS falls by what the
  // encoder read in place; private copies (converted weights) are not affected.
  size_t drop_pages() const { return store.drop_pages(); }
};

}  // namespace dit
