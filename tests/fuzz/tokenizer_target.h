// libFuzzer harness: the T5 tokenizer and prompt path (models/t5/t5_tokenizer.h, t5_text.h).
// The first input byte picks what is fuzzed, the second the max length (1..256); the rest:
//   0, 1: a prompt, through pixart_preprocess (0) or raw (1), tokenized with the test
//         fixture's tokenizer (tests/data/pixart-tiny/tokenizer);
//   2:    tokenizer_config.json next to the fixture's spiece.model, then a prompt;
//   3:    spiece.model itself (with no tokenizer_config.json), then a prompt.
// Only dit::Error may come out; tokens must be well formed (length, mask, </s>, ids in the
// vocabulary) or the harness aborts.
//
//   build-fuzz/bin/fuzz_tokenizer -dict=tests/data/fuzz/tokenizer/dict corpus/tokenizer tests/data/fuzz/tokenizer/seeds
//
// The harness body, shared by the libFuzzer binary (fuzz_<target>.cpp) and the normal
// suite, which runs every seed and regression input through it (tests/models/test_fuzz_inputs.cpp).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_util.h"
#include "models/t5/t5_config.h"
#include "models/t5/t5_text.h"
#include "models/t5/t5_tokenizer.h"

namespace dit_fuzz {
namespace detail {

inline void tok_invariant(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_tokenizer: invariant broken: %s\n", what);
  std::abort();
}

inline std::string fixture_tokenizer() { return std::string(DIT_TEST_DATA) + "/pixart-tiny/tokenizer"; }

// A private directory for the files under test (one per process, reused, removed at exit).
// The path lives in a plain array: a std::string's destructor would run before the exit
// handler that removes the directory (it was registered first), which then read freed memory.
inline const std::string& scratch_dir() {
  static char path[] = "/tmp/dit-fuzz-tokenizer-XXXXXX";
  static const std::string dir = [] {
    if (!::mkdtemp(path)) {
      std::perror("fuzz_tokenizer: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    });
    return std::string(path);
  }();
  return dir;
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

inline void check_tokens(const dit::T5Tokens& t, const dit::T5Tokenizer& tok, int64_t L) {
  tok_invariant(int64_t(t.ids.size()) == L && int64_t(t.mask.size()) == L, "ids and mask have max_length entries");
  tok_invariant(t.length >= 1 && t.length <= L, "length in 1..max_length");
  tok_invariant(t.ids[size_t(t.length - 1)] == tok.eos_id(), "</s> ends the tokens");
  for (int64_t i = 0; i < L; ++i) {
    tok_invariant(t.mask[size_t(i)] == (i < t.length ? 1 : 0), "mask is 1 on the tokens only");
    tok_invariant(t.ids[size_t(i)] >= 0 && t.ids[size_t(i)] < tok.vocab_size(), "ids in the vocabulary");
    if (i >= t.length) tok_invariant(t.ids[size_t(i)] == tok.pad_id(), "padding is <pad>");
  }
}

}  // namespace detail

inline int tokenizer(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  if (size < 2) return 0;
  const int mode = data[0] % 4;
  const int64_t L = 1 + data[1];
  std::string rest(reinterpret_cast<const char*>(data + 2), size - 2);
  static const dit::T5Tokenizer fixture = dit::T5Tokenizer::load(detail::fixture_tokenizer());
  if (mode <= 1) {
    dit_fuzz::accepts([&] {
      const std::string text = mode == 0 ? dit::pixart_preprocess(rest) : rest;
      detail::check_tokens(fixture.encode(text, L), fixture, L);
    });
    return 0;
  }
  // A file under test, then (after a NUL byte, if any) the prompt.
  const size_t nul = rest.find('\0');
  const std::string file = rest.substr(0, nul), prompt = nul == std::string::npos ? "a red fox" : rest.substr(nul + 1);
  const std::string dir = detail::scratch_dir();
  std::error_code ec;
  fs::remove(dir + "/tokenizer_config.json", ec);
  fs::remove(dir + "/spiece.model", ec);
  if (mode == 2) {
    fs::copy_file(detail::fixture_tokenizer() + "/spiece.model", dir + "/spiece.model", ec);
    detail::write_file(dir + "/tokenizer_config.json", file);
  } else {
    detail::write_file(dir + "/spiece.model", file);
  }
  dit_fuzz::accepts([&] {
    const dit::T5Tokenizer tok = dit::T5Tokenizer::load(dir);
    dit::T5Config cfg;
    cfg.vocab_size = 384;
    cfg.source = "fuzz/text_encoder/config.json";
    tok.check_compatible(cfg);
    detail::check_tokens(tok.encode(dit::pixart_preprocess(prompt), L), tok, L);
  });
  return 0;
}

}  // namespace dit_fuzz
