// Helpers for the T5 tests: golden files of the independent reference (pixart_reference.py,
// see tests/data/README.md) and scratch copies of model directories to break on purpose.
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "golden_util.h"
#include "models/t5/t5_encoder.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace t5_test {

struct EncodeGolden {
  std::vector<std::string> prompts;
  int64_t batch = 0, max_length = 0;
  std::vector<int64_t> ids, mask;  // [batch, max_length]
  dit::Tensor hidden;              // [batch, max_length, d_model]
};

// An encode.*.safetensors file written by the reference's `encode` (or tests/data/t5-variants/make_variants.py).
inline EncodeGolden load_encode_golden(const std::string& rel) {
  auto f = dit::SafeTensorsFile::open(dit_test::data_path(rel));
  EncodeGolden g;
  g.ids = f->get_int64("input_ids");
  g.mask = f->get_int64("attention_mask");
  g.hidden = f->get("hidden_states");
  g.batch = g.hidden.dim(0);
  g.max_length = g.hidden.dim(1);
  for (const auto& p : nlohmann::json::parse(f->metadata().at("prompts"))) g.prompts.push_back(p.get<std::string>());
  return g;
}

// The reference's hidden states against ours, relative to max |ref|.
inline dit_test::Diff encode_diff(const std::string& encoder_dir, const EncodeGolden& g, dit::DType compute) {
  auto w = std::make_shared<const dit::T5Weights>(dit::T5Weights::load(dit_test::data_path(encoder_dir), compute));
  dit::T5Encoder enc(w);
  enc.prepare(g.batch, g.max_length);
  dit::Tensor out = dit::Tensor::empty(g.hidden.shape());
  enc.encode(g.ids.data(), g.mask.data(), out.f32());
  return dit_test::diff(out, g.hidden);
}

// A scratch directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/dit-t5-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Copies tests/data/<rel> (a directory) into dst.
inline void copy_data_dir(const std::string& rel, const std::string& dst) {
  std::filesystem::copy(dit_test::data_path(rel), dst, std::filesystem::copy_options::recursive);
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

inline void write_json(const std::string& path, const nlohmann::json& j) { write_text(path, j.dump(2)); }

// Runs f, expects a dit::Error, returns its message (one line, checked).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const dit::Error& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  FAIL("no dit::Error thrown");
  return "";
}

}  // namespace t5_test
