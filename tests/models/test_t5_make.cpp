// The random T5 writer (models/t5/make_t5.h): the real layout, loadable by T5Weights and
// T5Tokenizer, deterministic; the trained tokenizer behaves like T5's.
#include <catch2/catch.hpp>
#include <fstream>

#include "models/t5/make_t5.h"
#include "models/t5/prompt_encoder.h"
#include "models/t5/t5_text.h"
#include "t5_test_util.h"

using namespace dit;

namespace {

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

}  // namespace

TEST_CASE("make_t5 writes a loadable, deterministic T5 encoder and tokenizer", "[t5][make]") {
  t5_test::TempDir tmp;
  MakeT5Options o = MakeT5Options::tiny();
  o.out_dir = tmp / "a";
  o.shards = 3;
  o.seed = 5;
  make_t5(o);
  const std::string te = o.out_dir + "/text_encoder", tk = o.out_dir + "/tokenizer";
  for (const char* f : {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                        "model-00003-of-00003.safetensors"})
    CHECK(std::filesystem::exists(te + "/" + f));
  for (const char* f : {"spiece.model", "tokenizer_config.json", "special_tokens_map.json"})
    CHECK(std::filesystem::exists(tk + "/" + f));
  const nlohmann::json cfg = t5_test::read_json(te + "/config.json");
  CHECK(cfg["feed_forward_proj"] == "gated-gelu");
  CHECK(cfg["d_model"] == 48);
  CHECK(cfg["vocab_size"] == 384);

  // Loads and encodes; the tokenizer is T5's shape (pad 0, eos 1, unk 2, 256 pieces + 100 extra ids).
  PromptEncoder pe = PromptEncoder::open(o.out_dir, DType::F32);
  CHECK(pe.tokenizer().pieces() == 256);
  CHECK(pe.tokenizer().vocab_size() == 356);
  const nlohmann::json tcfg = t5_test::read_json(tk + "/tokenizer_config.json");
  CHECK(tcfg["additional_special_tokens"].size() == 100);
  CHECK(tcfg["added_tokens_decoder"]["355"]["content"] == "<extra_id_0>");
  CHECK(tcfg["added_tokens_decoder"]["256"]["content"] == "<extra_id_99>");
  const T5Tokens t = pe.tokenize("A Red Fox in the snow", 16, false);
  CHECK(t.ids[size_t(t.length - 1)] == 1);
  CHECK(t.length > 3);
  const T5Tokens unk = pe.tokenize("ßüß", 8, false);  // unknown characters: one <unk> for the run
  CHECK(unk.ids[0] == 3);  // "▁" (the dummy prefix)
  CHECK(unk.ids[1] == 2);
  CHECK(unk.ids[2] == 1);
  EncodedPrompts e = pe.encode({"a red fox", ""}, 16);
  double sq = 0;
  for (int64_t i = 0; i < e.hidden.numel(); ++i) sq += double(e.hidden.f32()[i]) * e.hidden.f32()[i];
  CHECK(std::isfinite(sq));
  CHECK(sq > 0);

  // Deterministic: the same seed gives the same bytes; another seed other weights.
  MakeT5Options b = o;
  b.out_dir = tmp / "b";
  make_t5(b);
  CHECK(slurp(te + "/model-00002-of-00003.safetensors") == slurp(b.out_dir + "/text_encoder/model-00002-of-00003.safetensors"));
  CHECK(slurp(tk + "/spiece.model") == slurp(b.out_dir + "/tokenizer/spiece.model"));
  MakeT5Options c = o;
  c.out_dir = tmp / "c";
  c.seed = 6;
  c.shards = 1;
  c.tokenizer = false;
  make_t5(c);
  CHECK(std::filesystem::exists(c.out_dir + "/text_encoder/model.safetensors"));
  CHECK_FALSE(std::filesystem::exists(c.out_dir + "/tokenizer"));
  const WeightStore sa = WeightStore::open_dir(te, "model"), sc = WeightStore::open_dir(c.out_dir + "/text_encoder", "model");
  CHECK(sa.names() == sc.names());
  const Tensor qa = sa.get("encoder.block.1.layer.0.SelfAttention.q.weight"), qc = sc.get("encoder.block.1.layer.0.SelfAttention.q.weight");
  CHECK(std::memcmp(qa.data(), qc.data(), qa.nbytes()) != 0);

  // An existing non-empty component is refused.
  CHECK_THROWS_AS(make_t5(o), dit::Error);
}

TEST_CASE("make_t5: bf16 storage, layer override, XXL dimensions by default", "[t5][make]") {
  const MakeT5Options x = MakeT5Options::xxl();
  CHECK(x.d_model == 4096);
  CHECK(x.num_heads * x.d_kv == 4096);
  CHECK(x.d_ff == 10240);
  CHECK(x.num_layers == 24);
  CHECK(x.vocab_size == 32128);
  t5_test::TempDir tmp;
  MakeT5Options o = MakeT5Options::tiny();
  o.out_dir = tmp / "m";
  o.dtype = DType::BF16;
  o.layers = 3;
  make_t5(o);
  const T5Weights w = T5Weights::load(o.out_dir + "/text_encoder", DType::BF16);
  CHECK(w.cfg.num_layers == 3);
  CHECK(w.layers.size() == 3);
  CHECK(w.embedding.dtype() == DType::BF16);
}
