// The T5 tokenizer against the reference's tokenize.jsonl (T5Tokenizer semantics, checked
// identical to transformers' T5Tokenizer/T5TokenizerFast) and its errors.
#include <catch2/catch.hpp>
#include <fstream>

#include "models/t5/prompt_encoder.h"
#include "models/t5/t5_config.h"
#include "models/t5/t5_text.h"
#include "models/t5/t5_tokenizer.h"
#include "t5_test_util.h"

using namespace dit;
using t5_test::error_of;

TEST_CASE("T5 tokens equal the reference's for the 9 prompts of tokenize.jsonl", "[t5][tokenizer]") {
  std::ifstream f(dit_test::data_path("golden/pixart-tiny/tokenize.jsonl"));
  REQUIRE(f.good());
  for (const char* model : {"pixart-tiny", "pixart-alpha-tiny"}) {  // same spiece.model
    PromptEncoder pe = PromptEncoder::open(dit_test::data_path(model), DType::F32);
    f.clear();
    f.seekg(0);
    std::string line;
    int n = 0;
    while (std::getline(f, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      const std::string prompt = j["prompt"];
      const int64_t L = j["max_length"];
      INFO(model << " prompt: " << prompt);
      CHECK(pe.preprocess(prompt, false) == j["preprocessed"].get<std::string>());
      const T5Tokens t = pe.tokenize(prompt, L, false);
      CHECK(t.ids == j["input_ids"].get<std::vector<int64_t>>());
      CHECK(t.mask == j["attention_mask"].get<std::vector<int64_t>>());
      CHECK(t.pieces == j["pieces"].get<std::vector<std::string>>());
      const int64_t pieces = int64_t(j["pieces"].size());
      CHECK(t.truncated == (pieces > L - 1));
      CHECK(t.length == std::min(pieces, L - 1) + 1);
      ++n;
    }
    CHECK(n == 9);
  }
}

TEST_CASE("T5 tokenizer: truncation, empty prompt, max length bounds", "[t5][tokenizer]") {
  const T5Tokenizer tok = T5Tokenizer::load(dit_test::data_path("pixart-tiny/tokenizer"));
  CHECK(tok.pieces() == 256);
  CHECK(tok.extra_ids() == 100);
  CHECK(tok.pad_id() == 0);
  CHECK(tok.eos_id() == 1);
  // "a red fox in the snow" is 10 pieces (tokenize.jsonl): 4 of them fit at L = 5.
  const T5Tokens t = tok.encode("a red fox in the snow", 5);
  CHECK(t.ids == std::vector<int64_t>{4, 48, 12, 89, 1});
  CHECK(t.mask == std::vector<int64_t>{1, 1, 1, 1, 1});
  CHECK(t.truncated);
  const T5Tokens fits = tok.encode("a red fox in the snow", 11);  // 10 pieces + </s>: no truncation
  CHECK_FALSE(fits.truncated);
  CHECK(fits.ids.back() == 1);
  const T5Tokens one = tok.encode("a red fox", 1);  // only </s>
  CHECK(one.ids == std::vector<int64_t>{1});
  CHECK(one.truncated);
  const T5Tokens empty = tok.encode("", 4);
  CHECK(empty.ids == std::vector<int64_t>{1, 0, 0, 0});
  CHECK(empty.mask == std::vector<int64_t>{1, 0, 0, 0});
  CHECK_FALSE(empty.truncated);
  CHECK(empty.pieces.empty());
  for (int64_t bad : {int64_t(0), int64_t(-3), int64_t(4097), int64_t(1) << 40}) {
    const std::string msg = error_of([&] { tok.encode("x", bad); });
    CHECK(msg == "max length must be in 1..4096, found " + std::to_string(bad));
  }
  CHECK_NOTHROW(tok.encode("x", 4096));
  CHECK(error_of([&] { tok.encode("bad \xff byte", 8); }).find("at byte 4") != std::string::npos);
}

TEST_CASE("T5 tokenizer errors name the file", "[t5][tokenizer][errors]") {
  t5_test::TempDir tmp;
  const std::string model = tmp / "m";
  t5_test::copy_data_dir("pixart-tiny", model);
  const std::string tok = model + "/tokenizer", spiece = tok + "/spiece.model", tcfg = tok + "/tokenizer_config.json";
  const std::string enc_cfg = model + "/text_encoder/config.json";

  SECTION("missing spiece.model") {
    std::filesystem::remove(spiece);
    const std::string msg = error_of([&] { T5Tokenizer::load(tok); });
    CHECK(msg.find(spiece) != std::string::npos);
    CHECK(msg.find("not found") != std::string::npos);
    CHECK(error_of([&] { PromptEncoder::open(model, DType::F32); }).find(spiece) != std::string::npos);
  }
  SECTION("corrupt spiece.model") {
    t5_test::write_text(spiece, "this is not a protobuf model\n");
    const std::string msg = error_of([&] { T5Tokenizer::load(tok); });
    CHECK(msg.find(spiece) != std::string::npos);
    CHECK(msg.find("cannot load") != std::string::npos);
  }
  SECTION("truncated spiece.model") {
    const std::string full = dit_test::data_path("pixart-tiny/tokenizer/spiece.model");
    std::ifstream in(full, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    t5_test::write_text(spiece, bytes.substr(0, bytes.size() / 2));
    CHECK(error_of([&] { T5Tokenizer::load(tok); }).find(spiece) != std::string::npos);
  }
  SECTION("config vocab smaller than the tokenizer's") {
    nlohmann::json c = t5_test::read_json(enc_cfg);
    c["vocab_size"] = 300;  // 256 pieces + 100 extra ids = 356
    t5_test::write_json(enc_cfg, c);
    const std::string msg = error_of([&] { PromptEncoder::open(model, DType::F32); });
    CHECK(msg.find(spiece) != std::string::npos);
    CHECK(msg.find("356 tokens") != std::string::npos);
    CHECK(msg.find("vocab_size 300") != std::string::npos);
  }
  SECTION("config pad / eos ids differ from the tokenizer's") {
    for (const char* key : {"pad_token_id", "eos_token_id"}) {
      nlohmann::json c = t5_test::read_json(dit_test::data_path("pixart-tiny/text_encoder/config.json"));
      c[key] = 5;
      t5_test::write_json(enc_cfg, c);
      const std::string msg = error_of([&] { PromptEncoder::open(model, DType::F32); });
      CHECK(msg.find(enc_cfg) != std::string::npos);
      CHECK(msg.find(key) != std::string::npos);
    }
  }
  SECTION("tokenizer_config.json names other special tokens") {
    nlohmann::json c = t5_test::read_json(tcfg);
    c["eos_token"] = "<unk>";
    t5_test::write_json(tcfg, c);
    std::string msg = error_of([&] { T5Tokenizer::load(tok); });
    CHECK(msg.find(tcfg) != std::string::npos);
    CHECK(msg.find("eos token '<unk>' is id 2") != std::string::npos);
    c["eos_token"] = "</s>";
    c["pad_token"] = {{"content", "</s>"}, {"special", true}};  // AddedToken form
    t5_test::write_json(tcfg, c);
    msg = error_of([&] { T5Tokenizer::load(tok); });
    CHECK(msg.find("pad token '</s>' is id 1") != std::string::npos);
  }
  SECTION("too many extra ids") {
    nlohmann::json c = t5_test::read_json(tcfg);
    c["extra_ids"] = 200;
    t5_test::write_json(tcfg, c);
    const T5Tokenizer t = T5Tokenizer::load(tok);
    const std::string msg = error_of([&] { t.check_compatible(load_t5_config(enc_cfg)); });
    CHECK(msg.find("200 extra ids") != std::string::npos);
  }
  SECTION("bad tokenizer_config.json") {
    t5_test::write_text(tcfg, "{\"extra_ids\": \"many\"}");
    const std::string msg = error_of([&] { T5Tokenizer::load(tok); });
    CHECK(msg.find(tcfg) != std::string::npos);
    CHECK(msg.find("extra_ids") != std::string::npos);
  }
  SECTION("no tokenizer_config.json: T5 defaults") {
    std::filesystem::remove(tcfg);
    const T5Tokenizer t = T5Tokenizer::load(tok);
    CHECK(t.extra_ids() == 100);
    CHECK(t.encode("a red fox in the snow", 12).ids[10] == 1);
  }
}
