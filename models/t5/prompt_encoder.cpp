#include "models/t5/prompt_encoder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "models/t5/t5_text.h"
#include "runtime/error.h"
#include "runtime/json_config.h"

namespace dit {

PromptEncoder::PromptEncoder(PromptEncoder&&) noexcept = default;
PromptEncoder& PromptEncoder::operator=(PromptEncoder&&) noexcept = default;
PromptEncoder::~PromptEncoder() = default;

PromptEncoder PromptEncoder::open(const std::string& model_dir, DType compute, std::shared_ptr<TensorParallel> tp,
                                  WeightCacheOption cache) {
  struct stat st;
  DIT_CHECK(::stat(model_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
            model_dir << ": model directory does not exist");
  PromptEncoder pe;
  pe.dir_ = model_dir;
  pe.compute_ = compute;
  pe.tp_ = std::move(tp);
  pe.cache_ = std::move(cache);
  const std::string index = model_dir + "/model_index.json";
  if (::stat(index.c_str(), &st) == 0) {
    pe.pipeline_class_ = Config::load(index).get_string("_class_name", "");
    if (pe.pipeline_class_ == "PixArtAlphaPipeline") pe.default_max_length_ = 120;
  }
  pe.cfg_ = load_t5_config(model_dir + "/text_encoder/config.json");
  pe.tok_ = std::make_unique<T5Tokenizer>(T5Tokenizer::load(model_dir + "/tokenizer"));
  pe.tok_->check_compatible(pe.cfg_);
  return pe;
}

std::string PromptEncoder::preprocess(const std::string& prompt, bool raw) const {
  if (!raw) return pixart_preprocess(prompt);
  check_utf8(prompt);
  return prompt;
}

T5Tokens PromptEncoder::tokenize(const std::string& prompt, int64_t max_length, bool raw) const {
  check_t5_max_length(max_length);
  return tok_->encode(preprocess(prompt, raw), max_length);
}

EncodedPrompts PromptEncoder::encode(const std::vector<std::string>& prompts, int64_t max_length, bool raw,
                                    Padding padding) {
  DIT_CHECK(!prompts.empty(), "no prompt to encode");
  check_t5_max_length(max_length);
  EncodedPrompts e;
  const int64_t B = int64_t(prompts.size()), L = max_length, D = cfg_.d_model;
  int64_t n = 0;  // the positions encoded: all, or up to the longest prompt's end
  for (const std::string& p : prompts) {
    e.preprocessed.push_back(preprocess(p, raw));
    e.tokens.push_back(tok_->encode(e.preprocessed.back(), L));
    n = std::max(n, e.tokens.back().length);
  }
  if (padding == Padding::Encoded) n = L;
  std::vector<int64_t> ids, mask;  // [B, n]
  for (const T5Tokens& t : e.tokens) {
    ids.insert(ids.end(), t.ids.begin(), t.ids.begin() + n);
    mask.insert(mask.end(), t.mask.begin(), t.mask.begin() + n);
  }
  if (!enc_) {
    auto w = std::make_shared<const T5Weights>(T5Weights::load(dir_ + "/text_encoder", compute_, tp_.get(), cache_));
    enc_ = std::make_unique<T5Encoder>(std::move(w), tp_);
  }
  if (enc_->batch() != B || enc_->seq_len() != n) enc_->prepare(B, n);
  e.hidden = Tensor::empty({B, L, D});
  if (n == L) {
    enc_->encode(ids.data(), mask.data(), e.hidden.f32());
    return e;
  }
  // Each prompt's positions up to its end, zeros past it.
  Tensor h = Tensor::empty({B, n, D});
  enc_->encode(ids.data(), mask.data(), h.f32());
  std::memset(e.hidden.data(), 0, size_t(e.hidden.nbytes()));
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(e.hidden.f32() + b * L * D, h.f32() + b * n * D, size_t(e.tokens[size_t(b)].length * D) * 4);
  return e;
}

void PromptEncoder::release() {
  if (!enc_) return;
  enc_->drop_resident_pages();
  enc_.reset();
}

}  // namespace dit
