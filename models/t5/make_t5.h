// Writes a random T5 v1.1 text encoder and a small T5 tokenizer in the real diffusers /
// transformers layout — for benchmarks (T5-XXL dimensions, fewer layers) and demo
// pipelines, since real checkpoints cannot be downloaded here:
//
//   <out>/text_encoder/config.json, model.safetensors or model-0000i-of-0000K.safetensors + index
//   <out>/tokenizer/spiece.model, tokenizer_config.json, special_tokens_map.json
//
//   MakeT5Options o = MakeT5Options::xxl();   // d_model 4096, 64 heads × 64, d_ff 10240, vocab 32128
//   o.out_dir = "/tmp/t5"; o.layers = 2; o.shards = 2;
//   make_t5(o);
//
// Weights: randn with T5's init scales (q: 1/sqrt(d_model·d_kv), k/v: 1/sqrt(d_model), o:
// 1/sqrt(inner), wi: 1/sqrt(d_model), wo: 1/sqrt(d_ff), embedding 1, norms 1 + 0.1·randn,
// relative bias 0.5·randn), deterministic from the seed whatever the thread count.
// The tokenizer is a SentencePiece unigram model (256 pieces, nmt_nfkc, <pad>=0, </s>=1,
// <unk>=2, no BOS) trained deterministically (one thread, fixed seed) from a small built-in
// corpus, plus 100 <extra_id_N> tokens, like T5's.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/dtype.h"

namespace dit {

struct MakeT5Options {
  std::string out_dir;        // <out>/text_encoder and <out>/tokenizer must not exist or be empty
  int64_t d_model = 4096, d_kv = 64, num_heads = 64, d_ff = 10240, num_layers = 24, vocab_size = 32128;
  int layers = 0;             // > 0: overrides num_layers (benchmarks)
  int shards = 1;             // > 1: model-0000i-of-0000K.safetensors + model.safetensors.index.json
  DType dtype = DType::F32;   // stored type (F32 or BF16)
  uint64_t seed = 0;
  bool tokenizer = true;      // also write <out>/tokenizer

  static MakeT5Options xxl();   // t5-v1_1-xxl dimensions (24 layers, 4.8B encoder parameters: use `layers`)
  static MakeT5Options tiny();  // d_model 48, 4 heads × 8, d_ff 120, 2 layers, vocab 384 (tests)
};

// Writes each component into a temporary sibling and renames it into place.
void make_t5(const MakeT5Options& opt);

// The serialized spiece.model of the small T5 tokenizer (deterministic).
std::string train_t5_spiece();

}  // namespace dit
