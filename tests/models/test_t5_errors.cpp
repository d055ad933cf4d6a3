// Bad text encoder directories and inputs: each is one dit::Error line naming the file (and
// the key or tensor) and what was expected.
#include <catch2/catch.hpp>

#include "models/t5/t5_config.h"
#include "models/t5/t5_encoder.h"
#include "models/t5/t5_weights.h"
#include "runtime/json_config.h"
#include "runtime/safetensors.h"
#include "t5_test_util.h"

using namespace dit;
using t5_test::error_of;

namespace {

// The pixart-tiny text encoder rewritten as one model.safetensors with `edit` applied.
void write_single_file(const std::string& dir, const std::function<void(NamedTensors&)>& edit) {
  std::filesystem::create_directories(dir);
  std::filesystem::copy(dit_test::data_path("pixart-tiny/text_encoder/config.json"), dir + "/config.json");
  const WeightStore src = WeightStore::open_dir(dit_test::data_path("pixart-tiny/text_encoder"), "model");
  NamedTensors t;
  for (const std::string& n : src.names()) t.emplace_back(n, src.get(n).clone());
  edit(t);
  write_safetensors(dir + "/model.safetensors", t, {{"format", "pt"}});
}

}  // namespace

TEST_CASE("T5 config values are validated with one line naming the file and key", "[t5][errors]") {
  const nlohmann::json base = t5_test::read_json(dit_test::data_path("pixart-tiny/text_encoder/config.json"));
  struct Bad {
    const char* key;
    nlohmann::json value;
    const char* expect;
  };
  const Bad bad[] = {
      {"d_model", 0, "key 'd_model': expected an integer in 1..65536, found 0"},
      {"d_kv", -8, "key 'd_kv': expected an integer in 1..4096, found -8"},
      {"num_heads", "4", "key 'num_heads': expected integer, found string"},
      {"num_layers", 5000, "key 'num_layers': expected an integer in 1..1024, found 5000"},
      {"relative_attention_num_buckets", 31, "key 'relative_attention_num_buckets': expected an even number"},
      {"relative_attention_max_distance", 4, "key 'relative_attention_max_distance': expected an integer in 9.."},
      {"layer_norm_epsilon", 0.0, "key 'layer_norm_epsilon': expected a number in (0, 1), found 0"},
      {"vocab_size", 0, "key 'vocab_size': expected an integer in 1.."},
      {"pad_token_id", 384, "key 'pad_token_id': expected an integer in 0..383, found 384"},
      {"feed_forward_proj", "relu", "key 'feed_forward_proj': expected \"gated-gelu\" (T5 v1.1), found \"relu\""},
      {"feed_forward_proj", nullptr, "found \"relu\" (the default)"},
  };
  for (const Bad& b : bad) {
    nlohmann::json j = base;
    if (b.value.is_null())
      j.erase(b.key);
    else
      j[b.key] = b.value;
    const std::string msg = error_of([&] { t5_config_from(Config::parse(j.dump(), "te/config.json")); });
    CHECK(msg.rfind("te/config.json: ", 0) == 0);
    CHECK(msg.find(b.expect) != std::string::npos);
  }
  // torch_dtype and dense_act_fn are not read (the storage type is the files'; transformers
  // derives the activation from feed_forward_proj).
  nlohmann::json j = base;
  j["torch_dtype"] = "int8";
  j["dense_act_fn"] = "relu";
  const T5Config c = t5_config_from(Config::parse(j.dump(), "te/config.json"));
  CHECK(c.d_model == 48);
  CHECK(c.inner() == 32);
  CHECK(c.eps == 1e-6f);
}

TEST_CASE("T5 weight errors name the file and the tensor", "[t5][errors]") {
  t5_test::TempDir tmp;
  SECTION("missing shard") {
    const std::string dir = tmp / "te";
    t5_test::copy_data_dir("pixart-tiny/text_encoder", dir);
    std::filesystem::remove(dir + "/model-00002-of-00002.safetensors");
    const std::string msg = error_of([&] { T5Weights::load(dir, DType::F32); });
    CHECK(msg.find(dir + "/model.safetensors.index.json") != std::string::npos);
    CHECK(msg.find("model-00002-of-00002.safetensors does not exist") != std::string::npos);
  }
  SECTION("no weights at all") {
    const std::string dir = tmp / "te";
    std::filesystem::create_directories(dir);
    std::filesystem::copy(dit_test::data_path("pixart-tiny/text_encoder/config.json"), dir + "/config.json");
    const std::string msg = error_of([&] { T5Weights::load(dir, DType::F32); });
    CHECK(msg.find("model.safetensors") != std::string::npos);
  }
  SECTION("missing config") {
    const std::string dir = tmp / "te";
    std::filesystem::create_directories(dir);
    CHECK(error_of([&] { T5Weights::load(dir, DType::F32); }).find(dir + "/config.json") != std::string::npos);
  }
  SECTION("wrong tensor shape") {
    const std::string dir = tmp / "te";
    write_single_file(dir, [](NamedTensors& t) {
      for (auto& [n, x] : t)
        if (n == "encoder.block.1.layer.1.DenseReluDense.wi_1.weight") x = Tensor::empty({121, 48});
    });
    const std::string msg = error_of([&] { T5Weights::load(dir, DType::F32); });
    CHECK(msg == dir + "/model.safetensors: tensor 'encoder.block.1.layer.1.DenseReluDense.wi_1.weight': wrong shape "
                       "(expected [120, 48], found [121, 48])");
  }
  SECTION("missing tensor") {
    const std::string dir = tmp / "te";
    write_single_file(dir, [](NamedTensors& t) {
      t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "encoder.block.0.layer.0.SelfAttention.v.weight"; }),
              t.end());
    });
    const std::string msg = error_of([&] { T5Weights::load(dir, DType::F32); });
    CHECK(msg == "missing tensor 'encoder.block.0.layer.0.SelfAttention.v.weight' in " + dir + "/model.safetensors");
  }
  SECTION("missing relative attention bias") {
    const std::string dir = tmp / "te";
    write_single_file(dir, [](NamedTensors& t) {
      t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first.find("relative_attention_bias") != std::string::npos; }),
              t.end());
    });
    CHECK(error_of([&] { T5Weights::load(dir, DType::F32); }).find("relative_attention_bias") != std::string::npos);
  }
  SECTION("no embedding") {
    const std::string dir = tmp / "te";
    write_single_file(dir, [](NamedTensors& t) {
      t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "shared.weight"; }), t.end());
    });
    const std::string msg = error_of([&] { T5Weights::load(dir, DType::F32); });
    CHECK(msg.find("'shared.weight' (or 'encoder.embed_tokens.weight')") != std::string::npos);
    CHECK(msg.find(dir + "/model.safetensors") != std::string::npos);
  }
  SECTION("embedding rows differ from vocab_size") {
    const std::string dir = tmp / "te";
    write_single_file(dir, [](NamedTensors& t) {
      for (auto& [n, x] : t)
        if (n == "shared.weight") x = Tensor::empty({256, 48});
    });
    CHECK(error_of([&] { T5Weights::load(dir, DType::F32); }).find("'shared.weight': wrong shape (expected [384, 48]") !=
          std::string::npos);
  }
  SECTION("a block beyond num_layers") {
    const std::string dir = tmp / "te";
    write_single_file(dir, [](NamedTensors& t) { t.emplace_back("encoder.block.2.layer.0.layer_norm.weight", Tensor::empty({48})); });
    const std::string msg = error_of([&] { T5Weights::load(dir, DType::F32); });
    CHECK(msg.find("'encoder.block.2.layer.0.layer_norm.weight': block 2 but") != std::string::npos);
    CHECK(msg.find("num_layers 2") != std::string::npos);
  }
  SECTION("relative attention bias outside block 0") {
    const std::string dir = tmp / "te";
    write_single_file(dir, [](NamedTensors& t) {
      t.emplace_back("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight", Tensor::empty({32, 4}));
    });
    CHECK(error_of([&] { T5Weights::load(dir, DType::F32); }).find("only block 0 has a relative_attention_bias") !=
          std::string::npos);
  }
  SECTION("unsupported dtype") {
    const std::string dir = tmp / "te";
    t5_test::copy_data_dir("pixart-tiny/text_encoder", dir);
    // Rewrite shard 1's header dtype of one F32 tensor to I32 (same byte size).
    const std::string shard = dir + "/model-00001-of-00002.safetensors";
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), {});
    const size_t at = bytes.find("\"F32\"");
    REQUIRE(at != std::string::npos);
    f.seekp(std::streamoff(at));
    f.write("\"I32\"", 5);
    f.close();
    const std::string msg = error_of([&] { T5Weights::load(dir, DType::F32); });
    CHECK(msg.find(shard) != std::string::npos);
    CHECK(msg.find("unsupported dtype (expected F32, BF16 or F16, found I32)") != std::string::npos);
  }
}

TEST_CASE("T5 encoder refuses out-of-range ids and masks", "[t5][errors]") {
  auto w = std::make_shared<const T5Weights>(T5Weights::load(dit_test::data_path("pixart-tiny/text_encoder"), DType::F32));
  T5Encoder enc(w);
  std::vector<float> out(2 * 4 * 48);
  CHECK(error_of([&] { enc.encode(nullptr, nullptr, out.data()); }) == "T5Encoder::encode before prepare");
  enc.prepare(2, 4);
  std::vector<int64_t> ids = {4, 48, 1, 0, 1, 0, 0, 0}, mask = {1, 1, 1, 0, 1, 0, 0, 0};
  CHECK_NOTHROW(enc.encode(ids.data(), mask.data(), out.data()));
  ids[5] = 384;
  CHECK(error_of([&] { enc.encode(ids.data(), mask.data(), out.data()); }) ==
        "T5 encoder: token id 384 at position 1 of sequence 1 is outside 0..383");
  ids[5] = -1;
  CHECK_THROWS_AS(enc.encode(ids.data(), mask.data(), out.data()), dit::Error);
  ids[5] = 0;
  mask[2] = 2;
  CHECK(error_of([&] { enc.encode(ids.data(), mask.data(), out.data()); }) ==
        "T5 encoder: attention mask value 2 at position 2 of sequence 0 (expected 0 or 1)");
  CHECK(error_of([&] { enc.prepare(0, 4); }).find("empty shape") != std::string::npos);
}
