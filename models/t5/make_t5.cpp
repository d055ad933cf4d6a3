#include "models/t5/make_t5.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "models/common/random_weights.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

namespace dit {
namespace fs = std::filesystem;

namespace {

constexpr int kPieces = 256;
constexpr int kExtraIds = 100;

// Training text for the small tokenizer: prompts of the kind a text-to-image model sees.
const char* const kCorpus[] = {
    "a golden retriever puppy playing in fresh snow",
    "a watercolor painting of a quiet harbor at sunrise",
    "an old steam locomotive crossing a stone viaduct, 35mm film",
    "a bowl of ramen with a soft boiled egg, studio lighting",
    "portrait of a young woman with freckles and red hair, 85mm",
    "a futuristic city at night, neon signs and rain, cinematic",
    "a red fox sleeping under a pine tree in winter",
    "an astronaut floating above the earth, highly detailed, 8k",
    "a cozy reading nook with a window seat and warm light",
    "three cats sitting on a fence at dusk",
    "a snowy mountain peak reflected in a calm lake",
    "a plate of sushi on a black slate board, top view",
    "a medieval castle on a cliff above a stormy sea",
    "macro photo of a honey bee on a lavender flower",
    "a vintage red bicycle leaning against a yellow wall",
    "an oil painting of a wheat field with crows, 1890",
    "a hot air balloon festival over green hills, morning",
    "a small wooden boat on a misty river, long exposure",
    "a robot chef cooking pancakes in a tiny kitchen",
    "the northern lights above a frozen forest, 4k wallpaper",
    "a glass of lemonade with ice cubes and mint leaves",
    "a tabby cat wearing a tiny knitted hat, cute",
    "an ancient temple overgrown with jungle vines",
    "a lighthouse in a storm with huge waves crashing",
    "a bouquet of sunflowers in a blue ceramic vase",
    "a desert highway at sunset with a lonely gas station",
    "a panda eating bamboo in the rain, national geographic",
    "an underwater coral reef with colorful fish, 16:9",
    "a stack of old books and a burning candle",
    "a modern living room with large windows and plants",
    "a dragon made of clouds flying over a village",
    "children flying kites on a windy beach",
    "a steaming cup of coffee on a wooden desk, 50mm f/1.8",
    "a snowman with a carrot nose and a striped scarf",
    "an owl with big yellow eyes at midnight",
    "a busy train station in tokyo, motion blur",
    "a field of tulips in the netherlands, spring",
    "a knight in silver armor riding a white horse",
    "a tiny house on a floating island, fantasy art",
    "a chocolate cake with 12 candles and strawberries",
    "a rainy street in paris with umbrellas, black and white photo",
    "a polar bear walking on sea ice under a pale sky",
    "a sailing ship on a map, sepia tones",
    "a frog holding a leaf umbrella, children's book illustration",
    "an electric guitar on a stage with purple lights",
    "a basket of apples, pears and grapes on a table",
    "a lion resting in tall golden grass, wildlife photo",
    "a waterfall in iceland with a rainbow, 100% real",
    "a space station orbiting a ringed planet, sci-fi",
    "a farmhouse kitchen with copper pots and herbs",
    "a deer standing in a foggy meadow at dawn",
    "a neon sign that says \"open late\" above a diner",
    "a pair of hiking boots on a rocky trail",
    "a birthday party with balloons and confetti",
    "a koi pond in a japanese garden with a red bridge",
    "an elephant spraying water in a muddy river",
    "a cyberpunk girl with headphones, digital art",
    "a loaf of fresh bread and butter, still life",
    "a penguin colony on a snowy beach, 2:3",
    "a violin resting on sheet music, soft focus",
    "the milky way over a desert canyon, 30 second exposure",
    "a wolf howling on a hill under the full moon",
    "a garden with roses, a bench and a stone path",
    "a vintage car parked by the sea, 1960s postcard",
    "a mouse reading a tiny newspaper, whimsical",
    "a bowl of tomato soup with basil, overhead shot",
    "a quiet library with tall shelves and ladders",
    "a thunderstorm over a wheat field, dramatic sky",
    "a hummingbird drinking from a red flower",
    "a cabin in the woods with smoke from the chimney",
};

// offset + scale · randn(shape), in `dtype`; each 1M-element chunk seeded on its own, so the
// output depends only on (seed, tensor), never on the thread count.
Tensor random_tensor(const Shape& shape, uint64_t seed, double scale, double offset, DType dtype) {
  Tensor t = Tensor::empty(shape);
  float* p = t.f32();
  const int64_t n = t.numel(), chunk = int64_t(1) << 20, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    Xoshiro256 rng(seed * 0x100000001b3ull + uint64_t(c) * 0x9e3779b97f4a7c15ull);
    const int64_t b = c * chunk, e = std::min(n, b + chunk);
    for (int64_t i = b; i < e; i += 2) {
      float x, y;
      normal_pair(rng, &x, &y);
      p[i] = float(offset + scale * x);
      if (i + 1 < e) p[i + 1] = float(offset + scale * y);
    }
  }
  return dtype == DType::F32 ? t : t.to(dtype);
}

nlohmann::ordered_json t5_config_json(const MakeT5Options& o, int64_t layers) {
  return {{"_name_or_path", "random-t5-v1_1"},
          {"architectures", {"T5EncoderModel"}},
          {"classifier_dropout", 0.0},
          {"d_ff", o.d_ff},
          {"d_kv", o.d_kv},
          {"d_model", o.d_model},
          {"decoder_start_token_id", 0},
          {"dense_act_fn", "gelu_new"},
          {"dropout_rate", 0.1},
          {"eos_token_id", 1},
          {"feed_forward_proj", "gated-gelu"},
          {"initializer_factor", 1.0},
          {"is_encoder_decoder", true},
          {"is_gated_act", true},
          {"layer_norm_epsilon", 1e-06},
          {"model_type", "t5"},
          {"num_decoder_layers", layers},
          {"num_heads", o.num_heads},
          {"num_layers", layers},
          {"output_past", true},
          {"pad_token_id", 0},
          {"relative_attention_max_distance", 128},
          {"relative_attention_num_buckets", 32},
          {"tie_word_embeddings", false},
          {"torch_dtype", o.dtype == DType::BF16 ? "bfloat16" : "float32"},
          {"transformers_version", "4.38.2"},
          {"use_cache", true},
          {"vocab_size", o.vocab_size}};
}

void write_text_encoder(const MakeT5Options& o, int64_t layers, const fs::path& dir) {
  const int64_t D = o.d_model, I = o.num_heads * o.d_kv, F = o.d_ff;
  NamedTensors t;
  uint64_t k = 0;
  auto add = [&](const std::string& name, const Shape& shape, double scale, double offset = 0.0) {
    t.emplace_back(name, random_tensor(shape, o.seed * 1000003 + (++k), scale, offset, o.dtype));
  };
  add("shared.weight", {o.vocab_size, D}, 1.0);
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".layer.";
    add(p + "0.SelfAttention.q.weight", {I, D}, 1.0 / std::sqrt(double(D * o.d_kv)));
    add(p + "0.SelfAttention.k.weight", {I, D}, 1.0 / std::sqrt(double(D)));
    add(p + "0.SelfAttention.v.weight", {I, D}, 1.0 / std::sqrt(double(D)));
    add(p + "0.SelfAttention.o.weight", {D, I}, 1.0 / std::sqrt(double(I)));
    if (i == 0) add(p + "0.SelfAttention.relative_attention_bias.weight", {32, o.num_heads}, 0.5);
    add(p + "0.layer_norm.weight", {D}, 0.1, 1.0);
    add(p + "1.DenseReluDense.wi_0.weight", {F, D}, 1.0 / std::sqrt(double(D)));
    add(p + "1.DenseReluDense.wi_1.weight", {F, D}, 1.0 / std::sqrt(double(D)));
    add(p + "1.DenseReluDense.wo.weight", {D, F}, 1.0 / std::sqrt(double(F)));
    add(p + "1.layer_norm.weight", {D}, 0.1, 1.0);
  }
  add("encoder.final_layer_norm.weight", {D}, 0.1, 1.0);
  write_sharded_safetensors(dir.string(), "model", t, o.shards, {{"format", "pt"}});
  write_json(dir / "config.json", t5_config_json(o, layers));
}

void write_tokenizer(const fs::path& dir) {
  const std::string model = train_t5_spiece();
  write_file_atomic((dir / "spiece.model").string(), model.data(), model.size());
  nlohmann::ordered_json extra = nlohmann::ordered_json::array();
  for (int i = 0; i < kExtraIds; ++i) extra.push_back("<extra_id_" + std::to_string(i) + ">");
  auto tok = [](const std::string& s) {
    return nlohmann::ordered_json{{"content", s},         {"lstrip", false}, {"normalized", false},
                                  {"rstrip", false},      {"single_word", false}, {"special", true}};
  };
  nlohmann::ordered_json decoder = {{"0", tok("<pad>")}, {"1", tok("</s>")}, {"2", tok("<unk>")}};
  for (int id = kPieces; id < kPieces + kExtraIds; ++id)
    decoder[std::to_string(id)] = tok("<extra_id_" + std::to_string(kPieces + kExtraIds - 1 - id) + ">");
  write_json(dir / "tokenizer_config.json", {{"added_tokens_decoder", decoder},
                                             {"additional_special_tokens", extra},
                                             {"clean_up_tokenization_spaces", true},
                                             {"eos_token", "</s>"},
                                             {"extra_ids", kExtraIds},
                                             {"model_max_length", 1e30},
                                             {"pad_token", "<pad>"},
                                             {"sp_model_kwargs", nlohmann::ordered_json::object()},
                                             {"tokenizer_class", "T5Tokenizer"},
                                             {"unk_token", "<unk>"}});
  write_json(dir / "special_tokens_map.json", {{"additional_special_tokens", extra},
                                               {"eos_token", "</s>"},
                                               {"pad_token", "<pad>"},
                                               {"unk_token", "<unk>"}});
}

class CorpusIterator : public sentencepiece::SentenceIterator {
 public:
  bool done() const override { return i_ >= sizeof(kCorpus) / sizeof(kCorpus[0]); }
  void Next() override {
    if (++i_ < sizeof(kCorpus) / sizeof(kCorpus[0])) value_ = kCorpus[i_];
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  size_t i_ = 0;
  std::string value_ = kCorpus[0];
};

// Writes one component through a temporary sibling directory, renamed into place.
template <class F>
void write_component(const fs::path& target, F&& write) {
  DIT_CHECK(!fs::exists(target) || (fs::is_directory(target) && fs::is_empty(target)),
            target.string() << ": already exists and is not an empty directory");
  const fs::path tmp = target.parent_path() / (target.filename().string() + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    write(tmp);
    if (fs::exists(target)) fs::remove(target);
    fs::rename(tmp, target);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace

MakeT5Options MakeT5Options::xxl() { return MakeT5Options{}; }

MakeT5Options MakeT5Options::tiny() {
  MakeT5Options o;
  o.d_model = 48;
  o.d_kv = 8;
  o.num_heads = 4;
  o.d_ff = 120;
  o.num_layers = 2;
  o.vocab_size = 384;
  return o;
}

std::string train_t5_spiece() {
  sentencepiece::SetRandomGeneratorSeed(1234);
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "unigram"}, {"vocab_size", std::to_string(kPieces)}, {"character_coverage", "1.0"},
      {"pad_id", "0"},           {"eos_id", "1"},       {"unk_id", "2"},
      {"bos_id", "-1"},          {"pad_piece", "<pad>"}, {"eos_piece", "</s>"},
      {"unk_piece", "<unk>"},    {"normalization_rule_name", "nmt_nfkc"},
      {"num_threads", "1"},      {"shuffle_input_sentence", "false"},
      {"input_sentence_size", "0"}, {"minloglevel", "2"}};
  CorpusIterator it;
  std::string model;
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  DIT_CHECK(st.ok(), "training the T5 tokenizer (SentencePiece) failed: " << st.ToString());
  return model;
}

void make_t5(const MakeT5Options& o) {
  const int64_t layers = o.layers > 0 ? o.layers : o.num_layers;
  DIT_CHECK(!o.out_dir.empty(), "make_t5: an output directory is required");
  DIT_CHECK(o.d_model >= 1 && o.d_kv >= 1 && o.num_heads >= 1 && o.d_ff >= 1 && layers >= 1 && layers <= 1024,
            "make_t5: bad dimensions");
  DIT_CHECK(o.vocab_size >= kPieces + kExtraIds || !o.tokenizer,
            "make_t5: vocab_size " << o.vocab_size << " is smaller than the tokenizer's " << kPieces + kExtraIds
                                   << " tokens");
  DIT_CHECK(o.shards >= 1 && o.shards <= 1000, "make_t5: shards must be in 1..1000");
  const fs::path out(o.out_dir);
  try {
    fs::create_directories(out);
    write_component(out / "text_encoder", [&](const fs::path& d) { write_text_encoder(o, layers, d); });
    if (o.tokenizer) write_component(out / "tokenizer", [&](const fs::path& d) { write_tokenizer(d); });
  } catch (const fs::filesystem_error& e) {
    DIT_FAIL(o.out_dir << ": cannot write the T5 model: " << e.code().message());
  }
}

}  // namespace dit
