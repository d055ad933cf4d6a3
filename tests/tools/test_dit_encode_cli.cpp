// dit-encode as a user runs it: hidden states and tokens against the reference's goldens,
// defaults, and bad input (one line "dit-encode: error: ...", exit 1, no file).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/compute_types.h"
#include "cli_util.h"
#include "runtime/npy.h"
#include "runtime/safetensors.h"

using namespace dit_test;
namespace fs = std::filesystem;

namespace {

std::string encode_cmd(const std::string& model, const std::string& args) {
  return bin("dit-encode") + " -m " + data_path(model) + " " + args;
}

// Single-quoted for the shell.
std::string q(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void expect_encode_failure(const std::string& cmd, const std::string& needle, const std::string& output = "") {
  RunResult r = run(cmd);
  INFO("cmd: " << cmd << "\nstderr: " << r.err);
  CHECK(r.code == 1);
  CHECK(r.err.rfind("dit-encode: error: ", 0) == 0);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(count_lines(r.err) == 1);
  CHECK(r.out.empty());
  if (!output.empty()) {
    CHECK_FALSE(fs::exists(output));
    CHECK_FALSE(fs::exists(output.substr(0, output.size() - 4) + ".mask.npy"));
  }
}

struct Golden {
  std::vector<std::string> prompts;
  std::vector<int64_t> ids, mask;
  dit::Tensor hidden;  // [3, 16, d]
};

Golden golden(const std::string& model) {
  auto f = dit::SafeTensorsFile::open(data_path("golden/" + model + "/encode.L16.safetensors"));
  Golden g;
  g.ids = f->get_int64("input_ids");
  g.mask = f->get_int64("attention_mask");
  g.hidden = f->get("hidden_states");
  for (const auto& p : nlohmann::json::parse(f->metadata().at("prompts"))) g.prompts.push_back(p);
  return g;
}

double rel_diff(const float* a, const float* b, int64_t n) {
  double mx = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    mx = std::max(mx, double(std::fabs(a[i] - b[i])));
    ref = std::max(ref, double(std::fabs(b[i])));
  }
  return mx / ref;
}

}  // namespace

TEST_CASE("dit-encode writes the reference's hidden states and mask", "[cli][t5]") {
  Scratch s;
  for (const std::string model : {"pixart-tiny", "pixart-alpha-tiny"}) {
    const Golden g = golden(model);
    const int64_t d = g.hidden.dim(2);
    for (int b = 0; b < 3; ++b)
      for (const std::string& dtype : compute_type_names()) {
        const std::string out = s.file(model + std::to_string(b) + dtype + ".npy");
        RunResult r = run(encode_cmd(model, "-p " + q(g.prompts[size_t(b)]) + " --max-length 16 --dtype " + dtype +
                                                " -t 1 -o " + out));
        INFO(model << " prompt " << b << " " << dtype << "\nstderr: " << r.err);
        REQUIRE(r.code == 0);
        const dit::Tensor h = dit::read_npy(out);
        REQUIRE(h.shape() == dit::Shape{16, d});
        const double rel = rel_diff(h.f32(), g.hidden.f32() + b * 16 * d, 16 * d);
        INFO("rel " << rel);
        CHECK(rel <= (dtype == "f32" ? 1e-5 : 1e-2));
        const dit::Tensor m = dit::read_npy(s.file(model + std::to_string(b) + dtype + ".mask.npy"));
        REQUIRE(m.shape() == dit::Shape{16});
        for (int j = 0; j < 16; ++j) CHECK(m.f32()[j] == float(g.mask[size_t(b * 16 + j)]));
        // The long prompt (0) is truncated: said once, on stderr.
        CHECK((r.err.find("warning: the prompt has") != std::string::npos) == (b == 0));
        CHECK(r.err.find("wrote " + out) != std::string::npos);
      }
  }
}

TEST_CASE("dit-encode --ids prints the reference's tokens", "[cli][t5]") {
  std::ifstream f(data_path("golden/pixart-tiny/tokenize.jsonl"));
  std::string line;
  int n = 0;
  while (std::getline(f, line)) {
    const nlohmann::json want = nlohmann::json::parse(line);
    RunResult r = run(encode_cmd("pixart-tiny", "-p " + q(want["prompt"]) + " --ids --max-length " +
                                                    std::to_string(want["max_length"].get<int>())));
    INFO(line << "\nstderr: " << r.err);
    REQUIRE(r.code == 0);
    CHECK(count_lines(r.out) == 1);
    const nlohmann::json got = nlohmann::json::parse(r.out);
    for (const char* key : {"prompt", "preprocessed", "max_length", "pieces", "input_ids", "attention_mask"})
      CHECK(got[key] == want[key]);
    CHECK(got["truncated"] == (want["pieces"].size() > want["max_length"].get<size_t>() - 1));
    ++n;
  }
  CHECK(n == 9);
}

TEST_CASE("dit-encode defaults: max length from the pipeline class, lower/strip unless --raw", "[cli][t5]") {
  RunResult s = run(encode_cmd("pixart-tiny", "-p fox --ids"));
  REQUIRE(s.code == 0);
  CHECK(nlohmann::json::parse(s.out)["input_ids"].size() == 300);  // PixArtSigmaPipeline
  RunResult a = run(encode_cmd("pixart-alpha-tiny", "-p fox --ids"));
  REQUIRE(a.code == 0);
  CHECK(nlohmann::json::parse(a.out)["input_ids"].size() == 120);  // PixArtAlphaPipeline
  RunResult raw = run(encode_cmd("pixart-tiny", "-p '  A Red Fox ' --ids --raw --max-length 16"));
  REQUIRE(raw.code == 0);
  CHECK(nlohmann::json::parse(raw.out)["preprocessed"] == "  A Red Fox ");
  RunResult low = run(encode_cmd("pixart-tiny", "-p '  A Red Fox ' --ids --max-length 16"));
  CHECK(nlohmann::json::parse(low.out)["preprocessed"] == "a red fox");
  CHECK(nlohmann::json::parse(raw.out)["input_ids"] != nlohmann::json::parse(low.out)["input_ids"]);
  RunResult empty = run(encode_cmd("pixart-tiny", "-p '' --ids --max-length 4"));
  REQUIRE(empty.code == 0);
  CHECK(nlohmann::json::parse(empty.out)["input_ids"] == nlohmann::json::array({1, 0, 0, 0}));
  CHECK(nlohmann::json::parse(empty.out)["attention_mask"] == nlohmann::json::array({1, 0, 0, 0}));
  RunResult help = run(bin("dit-encode") + " --help");
  CHECK(help.code == 0);
  CHECK(help.out.find("--max-length") != std::string::npos);
  CHECK(help.out.find("300 for PixArtSigmaPipeline, 120 for PixArtAlphaPipeline") != std::string::npos);
  CHECK(help.out.find(".mask.npy") != std::string::npos);
}

TEST_CASE("dit-encode refuses bad input with one line and writes nothing", "[cli][t5]") {
  Scratch s;
  const std::string out = s.file("x.npy");
  expect_encode_failure(encode_cmd("pixart-tiny", "-p fox --max-length 0 -o " + out), "max length must be in 1..4096, found 0", out);
  expect_encode_failure(encode_cmd("pixart-tiny", "-p fox --max-length 100000 -o " + out),
                 "max length must be in 1..4096, found 100000", out);
  expect_encode_failure(encode_cmd("pixart-tiny", "-p \"$(printf 'a\\377b')\" -o " + out), "not valid UTF-8: invalid lead byte at byte 1", out);
  expect_encode_failure(encode_cmd("pixart-tiny", "-p fox"), "-o/--output FILE.npy is required");
  expect_encode_failure(encode_cmd("pixart-tiny", "-p fox --dtype f16 -o " + out), "f16", out);
  expect_encode_failure(encode_cmd("pixart-tiny", "-p fox -o " + s.file("no/such/dir/x.npy")), "does not exist");
  expect_encode_failure(bin("dit-encode") + " -m " + s.file("nothing") + " -p fox -o " + out, "does not exist", out);
  // A model without its tokenizer: the error names the file.
  const std::string m = s.file("m");
  fs::copy(data_path("pixart-tiny"), m, fs::copy_options::recursive);
  fs::remove(m + "/tokenizer/spiece.model");
  expect_encode_failure(bin("dit-encode") + " -m " + m + " -p fox -o " + out, m + "/tokenizer/spiece.model", out);
  // ... or with a missing weight shard: found when the weights are read, still no file.
  fs::copy(data_path("pixart-tiny/tokenizer/spiece.model"), m + "/tokenizer/spiece.model");
  fs::remove(m + "/text_encoder/model-00001-of-00002.safetensors");
  expect_encode_failure(bin("dit-encode") + " -m " + m + " -p fox -o " + out, "model-00001-of-00002.safetensors", out);
}
