#include "models/pixart/pixart_family.h"

#include <algorithm>
#include <map>

#include "models/pixart/aspect_bins.h"
#include "models/pixart/pixart_config.h"
#include "models/pixart/pixart_transformer.h"
#include "models/pixart/pixart_weights.h"
#include "models/t5/prompt_encoder.h"
#include "models/t5/t5_config.h"
#include "models/t5/t5_text.h"
#include "runtime/error.h"
#include "runtime/json_config.h"
#include "runtime/safetensors.h"

namespace dit {

namespace {

// Prompts are text: PixArt's preprocessing (lower/strip), the T5 tokenizer padded to the max
// sequence length, the T5 encoder. Each distinct (text, length) is encoded once per model load
// and kept (up to kCacheBytes): the empty negative prompt once, a batch's repeated prompts once.
class T5Conditioner final : public Conditioner {
 public:
  T5Conditioner(PromptEncoder pe, bool release_pages) : pe_(std::move(pe)), release_(release_pages) {}

  PromptInfo resolve(const std::string& prompt, bool negative, int max_length) const override {
    // The tokenizer refuses text that is not UTF-8 too (for every caller), as "prompt": checked
    // first here so that the error names which of the request's two texts it is.
    check_utf8(prompt, negative ? "negative prompt" : "prompt");
    const T5Tokens t = pe_.tokenize(prompt, max_length, false);  // and the length
    DIT_CHECK(negative || t.length > 1, "the prompt is empty: give a text (e.g. \"a red fox in the snow\")");
    PromptInfo p;
    p.tokens = int(t.length);
    p.truncated = t.truncated;
    return p;
  }

  void encode(const std::vector<CondRow>& rows, int max_length, Conditioning& cond) override {
    const int64_t B = int64_t(rows.size()), L = max_length, C = pe_.config().d_model;
    std::vector<std::string> todo;  // distinct prompts not in the cache
    for (const CondRow& r : rows)
      if (!cache_.count({r.prompt, L}) && std::find(todo.begin(), todo.end(), r.prompt) == todo.end())
        todo.push_back(r.prompt);
    std::map<std::string, Entry> fresh;
    if (!todo.empty()) {
      // The padding's states are zeros, not encoded: the transformer's cross-attention weighs
      // them 0 (and skips them past the batch's last prompt token: attended_text_tokens).
      const EncodedPrompts e = pe_.encode(todo, L, false, PromptEncoder::Padding::Zeros);
      for (size_t i = 0; i < todo.size(); ++i) {
        Entry& en = fresh[todo[i]];
        en.hidden.assign(e.hidden.f32() + int64_t(i) * L * C, e.hidden.f32() + int64_t(i + 1) * L * C);
        for (int64_t m : e.tokens[i].mask) en.mask.push_back(float(m));
      }
      if (release_) pe_.release();  // not resident during the denoising loop
    }
    cond.batch = B;
    cond.class_ids.clear();
    if (!cond.text.defined() || cond.text.shape() != Shape({B, L, C})) {
      cond.text = Tensor::empty({B, L, C});
      cond.text_mask = Tensor::empty({B, L});
    }
    for (int64_t b = 0; b < B; ++b) {
      const std::string& p = rows[size_t(b)].prompt;
      const auto f = fresh.find(p);
      const Entry& e = f != fresh.end() ? f->second : cache_.at({p, L});
      std::copy(e.hidden.begin(), e.hidden.end(), cond.text.f32() + b * L * C);
      std::copy(e.mask.begin(), e.mask.end(), cond.text_mask.f32() + b * L);
    }
    for (auto& [p, e] : fresh) remember(p, L, std::move(e));
  }

 private:
  struct Entry {
    std::vector<float> hidden, mask;  // [L, C], [L]
  };
  static constexpr size_t kCacheBytes = size_t(512) << 20;

  void remember(const std::string& prompt, int64_t L, Entry e) {
    const size_t bytes = (e.hidden.size() + e.mask.size()) * 4;
    if (cached_bytes_ + bytes > kCacheBytes) {  // full: start again (a batch's prompts are mostly new)
      cache_.clear();
      cached_bytes_ = 0;
    }
    cache_[{prompt, L}] = std::move(e);
    cached_bytes_ += bytes;
  }

  mutable PromptEncoder pe_;
  bool release_;
  std::map<std::pair<std::string, int64_t>, Entry> cache_;
  size_t cached_bytes_ = 0;
};

}  // namespace

LoadedFamily load_pixart_family(const LoadOptions& opt, const ModelIndex& index, const Config& transformer_config) {
  const bool sigma = index.pipeline_class == "PixArtSigmaPipeline";
  for (const char* need : {"text_encoder", "tokenizer"})
    DIT_CHECK(index.components.count(need), index.dir << "/model_index.json: component '" << need
                                                      << "' missing (a " << index.pipeline_class
                                                      << " needs a T5 text encoder and its tokenizer)");
  const PixArtConfig cfg = pixart_config_from(transformer_config);
  DIT_CHECK(!sigma || !cfg.use_additional_conditions,
            transformer_config.source() << ": use_additional_conditions is true, but PixArtSigmaPipeline passes no "
                                           "resolution/aspect-ratio conditions");
  // The text encoder is split over every model-parallel rank of the guidance half (as many as
  // it has heads), so their encoding work is shared, not repeated.
  const int64_t t5_heads = load_t5_config(opt.dir + "/text_encoder/config.json").num_heads;
  PromptEncoder pe = PromptEncoder::open(opt.dir, opt.dtype,
                                         opt.parallel->layers().tensor_parallel(TpScope::TextEncoder, t5_heads),
                                         opt.weight_cache);
  DIT_CHECK(pe.config().d_model == cfg.caption_channels,
            transformer_config.source() << ": caption_channels " << cfg.caption_channels
                                        << " does not match the text encoder's d_model " << pe.config().d_model);
  WeightStore store = WeightStore::open_dir(opt.dir + "/transformer");
  use_weight_cache(store, opt.dtype, opt.weight_cache);

  LoadedFamily f;
  f.rules.family = sigma ? "PixArt-Σ" : "PixArt-α";
  f.rules.prompt = PromptKind::Text;
  f.rules.default_steps = 20;  // the pipelines' __call__ defaults
  f.rules.default_guidance = 4.5;
  f.rules.default_max_sequence_length = sigma ? 300 : 120;
  f.rules.cond_first = false;  // CFG batch [uncond, cond]
  f.rules.bins = pixart_aspect_bins(cfg.sample_size, sigma);
  f.rules.text_vocab = pe.config().vocab_size;
  std::unique_ptr<TensorParallel> tp = opt.parallel->layers().tensor_parallel(TpScope::Transformer);
  PixArtWeights w = PixArtWeights::load(cfg, store, opt.dtype, opt.qkv, *tp);
  f.model = std::make_unique<PixArtTransformer>(std::move(w), std::move(tp));
  f.conditioner = std::make_unique<T5Conditioner>(std::move(pe), opt.release_text_encoder);
  return f;
}

}  // namespace dit
