// T5Tokenizer (transformers, SentencePiece unigram over tokenizer/spiece.model) with the
// arguments PixArt's pipelines use: padding="max_length", truncation=True,
// add_special_tokens=True.
//
//   T5Tokenizer tok = T5Tokenizer::load(dir + "/tokenizer");
//   tok.check_compatible(t5_config);            // vocabulary and special ids vs text_encoder/config.json
//   T5Tokens t = tok.encode("a red fox", 300);  // text already preprocessed (pixart_preprocess)
//
// ids = SentencePiece(text)[:L-1] + [</s>], padded with <pad> to L; mask 1 on the pieces and
// </s>, 0 on the padding. The normaliser (NFKC, whitespace) lives inside spiece.model and is
// applied by libsentencepiece. Not replicated from transformers: literal special-token
// strings in the text ("</s>", "<extra_id_0>") are tokenized as plain text, like the
// reference implementation (transformers would map them to their ids).
//
// Errors are one line naming the file: a missing or corrupt spiece.model, a bad
// tokenizer_config.json, special tokens that are not T5's (<pad> = 0, </s> = 1), or a
// vocabulary larger than the encoder's embedding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace dit {

struct T5Config;

// Largest max_length accepted (transformers has no limit; 4096 bounds the buffers: the
// T5 attention of 4096 tokens is already 16.7M logits per head).
constexpr int64_t kT5MaxLength = 4096;

struct T5Tokens {
  std::vector<int64_t> ids;          // [max_length]
  std::vector<int64_t> mask;         // [max_length], 1 on pieces and </s>
  std::vector<std::string> pieces;   // every piece of the text, before truncation
  int64_t length = 0;                // tokens with mask 1 (pieces kept + </s>)
  bool truncated = false;            // some pieces did not fit in max_length - 1
};

class T5Tokenizer {
 public:
  // dir: the tokenizer directory (spiece.model, optional tokenizer_config.json).
  static T5Tokenizer load(const std::string& dir);
  ~T5Tokenizer();
  T5Tokenizer(T5Tokenizer&&) noexcept;
  T5Tokenizer& operator=(T5Tokenizer&&) noexcept;

  // One-line error (naming the files) unless pieces + extra_ids <= vocab_size and the
  // config's pad/eos ids are the tokenizer's.
  void check_compatible(const T5Config& cfg) const;
  // `text` must be valid UTF-8 (see t5_text.h); max_length in 1..kT5MaxLength.
  T5Tokens encode(const std::string& text, int64_t max_length) const;

  int64_t pieces() const;      // SentencePiece vocabulary
  int64_t extra_ids() const;   // <extra_id_N> tokens after the pieces
  int64_t vocab_size() const { return pieces() + extra_ids(); }
  int64_t pad_id() const { return pad_id_; }
  int64_t eos_id() const { return eos_id_; }
  const std::string& model_path() const { return model_path_; }

 private:
  T5Tokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string model_path_, config_path_;  // config_path_ empty when there is no tokenizer_config.json
  int64_t extra_ids_ = 100, pad_id_ = 0, eos_id_ = 1;
};

// Checks 1 <= max_length <= kT5MaxLength: "max length must be in 1..4096, found N".
void check_t5_max_length(int64_t max_length);

}  // namespace dit
