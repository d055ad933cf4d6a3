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

#include "models/common/tp_plan.h"
#include "runtime/token_split.h"

#include <string>
#include <vector>

#include "models/t5/t5_config.h"
#include "runtime/linear.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"
#include "runtime/weight_cache.h"

namespace dit {

// How tensor parallelism splits T5 (Megatron's plan): q, k, v column-parallel by heads, o row-
// parallel; wi_0, wi_1 column-parallel, wo row-parallel; the embedding vocab-parallel.
const TpPlan& t5_tp_plan();

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
  // Under tensor parallelism (t5_tp_plan) a rank holds its heads' q/k/v rows and o columns,
  // its d_ff columns of wi_0/wi_1 and rows of wo, its heads of the relative bias and its
  // vocabulary rows of the embedding (vocab-parallel); all of them with one rank.
  TokenRange heads;      // this rank's heads
  TokenRange vocab;      // this rank's vocabulary rows
  Tensor embedding;      // [vocab rows, d_model] F32 or BF16 (shared.weight or encoder.embed_tokens.weight)
  Tensor rel_bias;       // [num_buckets, heads] f32, block 0's relative_attention_bias
  std::vector<T5LayerWeights> layers;
  Tensor final_ln;       // [d_model] f32
  WeightStore store;     // the mapped files

  // dir: the text_encoder directory (config.json and the safetensors files); `tp` says which
  // shard this rank holds (the default: all of it).
  // `cache`: f32 copies of half-precision weights (runtime/weight_cache.h; default off).
  static T5Weights load(const std::string& dir, DType compute, const TensorParallel* tp = nullptr,
                        const WeightCacheOption& cache = {});
  // Drops the mapped files' resident pages (WeightStore::drop_pages): RSS falls by what the
  // encoder read in place; private copies (converted weights) are not affected.
  size_t drop_pages() const { return store.drop_pages(); }
};

}  // namespace dit
