// Configuration of a T5 v1.1 encoder (transformers T5EncoderModel, "gated-gelu"), read from
// text_encoder/config.json with transformers' defaults for missing keys, and validated.
//
//   T5Config c = load_t5_config(dir + "/text_encoder/config.json");
//   c.inner();   // num_heads · d_kv (need not equal d_model)
//
// Every bad value is one line naming the file and the key, e.g.
//   "m/text_encoder/config.json: key 'd_kv': expected an integer in 1..4096, found 0".
// `torch_dtype` is ignored: it is not the storage type (the safetensors dtypes are).
// `dense_act_fn` is ignored too: transformers derives it from feed_forward_proj
// ("gated-gelu" -> gelu_new, the tanh approximation).
#pragma once

#include <cstdint>
#include <string>

namespace dit {

class Config;

struct T5Config {
  int64_t d_model = 512;
  int64_t d_kv = 64;
  int64_t num_heads = 8;
  int64_t d_ff = 2048;
  int64_t num_layers = 6;
  int64_t num_buckets = 32;    // relative_attention_num_buckets
  int64_t max_distance = 128;  // relative_attention_max_distance
  float eps = 1e-6f;           // layer_norm_epsilon
  int64_t vocab_size = 32128;
  int64_t pad_token_id = 0;
  int64_t eos_token_id = 1;
  std::string source;          // the config file, for messages

  int64_t inner() const { return num_heads * d_kv; }
};

// Parses and validates; errors name cfg.source() and the key.
T5Config t5_config_from(const Config& cfg);
T5Config load_t5_config(const std::string& path);

}  // namespace dit
