// libFuzzer harness: the batch-file parser of `dit-gen --batch` (tools/cli/batch_items.h).
// The input is a whole batch file (JSON Lines or plain text). parse_batch must never throw
// (a bad line becomes a failed item); every item that is not failed must have a prompt and
// an output that stays inside the output directory, and no two such items share an output.
// A broken invariant aborts (a finding); so does any exception.
//
//   build-fuzz/bin/fuzz_batch_line -dict=tests/data/fuzz/batch_line/dict corpus/batch_line tests/data/fuzz/batch_line/seeds
//
// The harness body, shared by the libFuzzer binary (fuzz_<target>.cpp) and the normal
// suite, which runs every seed and regression input through it (tests/tools/test_fuzz_inputs.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "tools/cli/batch_items.h"
#include "tools/cli/options.h"

namespace dit_fuzz {
namespace detail {
inline void batch_invariant(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_batch_line: invariant broken: %s\n", what);
  std::abort();
}
}  // namespace detail

inline int batch_line(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const std::string text(reinterpret_cast<const char*>(data), size);
  dit::cli::GenOptions defaults;
  defaults.seed = 7;
  const std::string out_dir = "/nonexistent/fuzz-out";
  const auto items = dit::cli::parse_batch(text, defaults, out_dir);
  std::set<std::string> outputs;
  int index = 0;
  for (const auto& it : items) {
    detail::batch_invariant(it.index == index++, "items are numbered in order");
    detail::batch_invariant(it.line >= 1, "line numbers are 1-based");
    detail::batch_invariant(!it.output.empty(), "every item has an output name");
    (void)dit::cli::slugify(it.req.prompt);
    if (!it.error.empty()) {
      detail::batch_invariant(it.error.rfind("line ", 0) == 0, "an item's error names its line");
      continue;
    }
    detail::batch_invariant(it.req.prompt.find_first_not_of(" \t\r\n\v\f") != std::string::npos, "a prompt");
    const fs::path norm = fs::path(it.output).lexically_normal();
    detail::batch_invariant(!norm.is_absolute() && !norm.empty() && norm.begin()->string() != "..",
                            "the output stays inside --output-dir");
    detail::batch_invariant(it.path.rfind(out_dir + "/", 0) == 0, "the output path is under --output-dir");
    detail::batch_invariant(outputs.insert(norm.string()).second, "outputs are distinct");
  }
  return 0;
}

}  // namespace dit_fuzz
