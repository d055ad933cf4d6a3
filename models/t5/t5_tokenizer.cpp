#include "models/t5/t5_tokenizer.h"

#include <sentencepiece_processor.h>
#include <sys/stat.h>

#include <algorithm>

#include "models/t5/t5_config.h"
#include "models/t5/t5_text.h"
#include "runtime/error.h"
#include "runtime/json_config.h"
#include "runtime/printable.h"

namespace dit {
namespace {

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A special token in tokenizer_config.json: a string, or an AddedToken object {"content": ...}.
std::string token_string(const Config& c, const std::string& key, const std::string& dflt) {
  if (!c.has(key) || c.is_null(key)) return dflt;
  const nlohmann::json& v = c.json().at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) return c.child(key).get_string("content");
  DIT_FAIL(c.source() << ": key '" << key << "': expected a string or an object with \"content\", found "
                      << v.type_name());
}

}  // namespace

void check_t5_max_length(int64_t max_length) {
  DIT_CHECK(max_length >= 1 && max_length <= kT5MaxLength,
            "max length must be in 1.." << kT5MaxLength << ", found " << max_length);
}

T5Tokenizer::~T5Tokenizer() = default;
T5Tokenizer::T5Tokenizer(T5Tokenizer&&) noexcept = default;
T5Tokenizer& T5Tokenizer::operator=(T5Tokenizer&&) noexcept = default;

T5Tokenizer T5Tokenizer::load(const std::string& dir) {
  T5Tokenizer t;
  t.model_path_ = dir + "/spiece.model";
  DIT_CHECK(is_file(t.model_path_), t.model_path_ << ": SentencePiece model not found");
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = t.sp_->Load(t.model_path_);
  if (!st.ok()) {
    std::string why = st.ToString();
    if (why.find("ParseFromArray") != std::string::npos) why = "not a valid SentencePiece model file (protobuf parse failed)";
    while (!why.empty() && why.back() == ' ') why.pop_back();
    DIT_FAIL(t.model_path_ << ": cannot load the SentencePiece model: " << printable(why, 200));
  }

  std::string eos = "</s>", pad = "<pad>";
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (is_file(cfg_path)) {
    t.config_path_ = cfg_path;
    const Config c = Config::load(cfg_path);
    t.extra_ids_ = c.get_int("extra_ids", 100);
    DIT_CHECK(t.extra_ids_ >= 0 && t.extra_ids_ <= 100000,
              cfg_path << ": key 'extra_ids': expected an integer in 0..100000, found " << t.extra_ids_);
    eos = token_string(c, "eos_token", eos);
    pad = token_string(c, "pad_token", pad);
    token_string(c, "unk_token", "<unk>");  // type-checked only: SentencePiece knows its unk
  }
  const std::string where = t.config_path_.empty() ? t.model_path_ : t.config_path_;
  // PieceToId gives the unknown id for a piece that is not in the model.
  t.eos_id_ = t.sp_->PieceToId(eos);
  t.pad_id_ = t.sp_->PieceToId(pad);
  DIT_CHECK(t.pad_id_ == 0 && t.sp_->IdToPiece(0) == pad,
            where << ": pad token '" << printable(pad) << "' is id " << t.pad_id_ << " in " << t.model_path_
                  << " (T5 expects 0)");
  DIT_CHECK(t.eos_id_ == 1 && t.sp_->IdToPiece(1) == eos,
            where << ": eos token '" << printable(eos) << "' is id " << t.eos_id_ << " in " << t.model_path_
                  << " (T5 expects 1)");
  return t;
}

int64_t T5Tokenizer::pieces() const { return sp_->GetPieceSize(); }
int64_t T5Tokenizer::extra_ids() const { return extra_ids_; }

void T5Tokenizer::check_compatible(const T5Config& cfg) const {
  const std::string from = config_path_.empty() ? model_path_ : model_path_ + " + " + config_path_;
  DIT_CHECK(vocab_size() <= cfg.vocab_size, from << ": " << pieces() << " pieces + " << extra_ids_
                                                 << " extra ids = " << vocab_size() << " tokens, more than "
                                                 << cfg.source << " vocab_size " << cfg.vocab_size);
  DIT_CHECK(cfg.pad_token_id == pad_id_, cfg.source << ": key 'pad_token_id' is " << cfg.pad_token_id
                                                    << " but the tokenizer's pad token is id " << pad_id_ << " ("
                                                    << from << ")");
  DIT_CHECK(cfg.eos_token_id == eos_id_, cfg.source << ": key 'eos_token_id' is " << cfg.eos_token_id
                                                    << " but the tokenizer's eos token is id " << eos_id_ << " ("
                                                    << from << ")");
}

T5Tokens T5Tokenizer::encode(const std::string& text, int64_t max_length) const {
  check_t5_max_length(max_length);
  check_utf8(text);
  std::vector<int> ids;
  auto st = sp_->Encode(text, &ids);
  DIT_CHECK(st.ok(), model_path_ << ": SentencePiece cannot encode the prompt: " << printable(st.ToString(), 200));
  T5Tokens t;
  st = sp_->Encode(text, &t.pieces);
  DIT_CHECK(st.ok(), model_path_ << ": SentencePiece cannot encode the prompt: " << printable(st.ToString(), 200));
  const int64_t keep = std::min<int64_t>(int64_t(ids.size()), max_length - 1);
  t.truncated = int64_t(ids.size()) > keep;
  t.length = keep + 1;
  t.ids.assign(size_t(max_length), pad_id_);
  t.mask.assign(size_t(max_length), 0);
  for (int64_t i = 0; i < keep; ++i) t.ids[size_t(i)] = ids[size_t(i)];
  t.ids[size_t(keep)] = eos_id_;
  std::fill(t.mask.begin(), t.mask.begin() + t.length, 1);
  return t;
}

}  // namespace dit
