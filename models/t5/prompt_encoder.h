// PixArt's prompt encoding over a diffusers pipeline directory (uses DIR/tokenizer and
// DIR/text_encoder): preprocess (lower/strip), tokenize to max_length, run the T5 encoder.
//
//   PromptEncoder pe = PromptEncoder::open("/models/PixArt-Sigma", DType::BF16);
//   EncodedPrompts e = pe.encode({"", "a red fox"}, pe.default_max_length());  // [2, 300, 4096]
//
// open() reads and cross-checks the text encoder's config.json and the tokenizer; the
// weights are loaded by the first encode(). Default max length: 300 for
// PixArtSigmaPipeline, 120 for PixArtAlphaPipeline (model_index.json's _class_name), 300
// for anything else.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/t5/t5_config.h"
#include "models/t5/t5_encoder.h"
#include "models/t5/t5_tokenizer.h"
#include "runtime/tensor.h"
#include "runtime/weight_cache.h"

namespace dit {

struct EncodedPrompts {
  std::vector<std::string> preprocessed;  // the text given to the tokenizer
  std::vector<T5Tokens> tokens;           // ids, mask, pieces, truncation per prompt
  Tensor hidden;                          // [prompts, max_length, d_model] f32, padded positions included
                                          // (zeros with Padding::Zeros)
};

class PromptEncoder {
 public:
  // `tp` (optional): how the text encoder is split over ranks (TpScope::TextEncoder); made
  // from the config's head count by the caller, e.g. ctx.layers().tensor_parallel(...).
  // `cache`: where f32 copies of a half-precision text encoder go (runtime/weight_cache.h).
  static PromptEncoder open(const std::string& model_dir, DType compute,
                            std::shared_ptr<TensorParallel> tp = nullptr, WeightCacheOption cache = {});
  PromptEncoder(PromptEncoder&&) noexcept;
  PromptEncoder& operator=(PromptEncoder&&) noexcept;
  ~PromptEncoder();

  int64_t default_max_length() const { return default_max_length_; }
  // model_index.json's _class_name, or "" when there is none.
  const std::string& pipeline_class() const { return pipeline_class_; }
  const T5Config& config() const { return cfg_; }
  const T5Tokenizer& tokenizer() const { return *tok_; }

  // pixart_preprocess(prompt), or the prompt itself (checked to be UTF-8) when raw.
  std::string preprocess(const std::string& prompt, bool raw) const;
  T5Tokens tokenize(const std::string& prompt, int64_t max_length, bool raw) const;
  // What encode() does with the padding past a prompt's </s>: Encoded, as T5EncoderModel
  // does (every position's state, as the pipelines pass them on); Zeros: only the positions up
  // to the longest prompt's end are encoded (the padding's keys are masked, so a prompt's own
  // positions come out the same, up to rounding) and each prompt's padding is zero — for a
  // reader that weighs the padding 0 (PixArt's masked cross-attention): 8 positions instead of
  // 300 for a short prompt.
  enum class Padding { Encoded, Zeros };
  // Loads the weights on first use; prepares the encoder for (prompts, the positions encoded).
  EncodedPrompts encode(const std::vector<std::string>& prompts, int64_t max_length, bool raw = false,
                        Padding padding = Padding::Encoded);
  // The encoder, once encode() has loaded it (else null).
  T5Encoder* encoder() { return enc_.get(); }
  // Frees the encoder and its weights (private copies included) and gives back its mapped
  // pages; the next encode() loads them again.
  void release();

 private:
  PromptEncoder() = default;
  std::string dir_, pipeline_class_;
  int64_t default_max_length_ = 300;
  DType compute_ = DType::F32;
  T5Config cfg_;
  std::unique_ptr<T5Tokenizer> tok_;
  std::unique_ptr<T5Encoder> enc_;
  std::shared_ptr<TensorParallel> tp_;
  WeightCacheOption cache_;
};

}  // namespace dit
