// dit-bench's options, all checked before a model is created or a rank started (bad values
// used to reach the ranks: several lines per error, a thousand processes for u1000, a SIGSEGV
// at -t 100000).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>

#include "models/make_model.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "tools/bench/bench.h"

namespace dit::bench {
namespace fs = std::filesystem;

namespace {

int64_t parse_count(const std::string& s, const char* flag, int64_t lo, int64_t hi) {
  DIT_CHECK(!s.empty() && s.size() <= 12 && s.find_first_not_of("0123456789") == std::string::npos,
            flag << ": '" << s.substr(0, 40) << "' is not a whole number");
  const int64_t v = std::stoll(s);
  DIT_CHECK(v >= lo && v <= hi, flag << ": " << v << " is not in " << lo << ".." << hi);
  return v;
}

}  // namespace

void check_options(const Opts& o) {
  DIT_CHECK(o.steps >= 1 && o.steps <= 10000, "--steps must be in 1..10000");
  DIT_CHECK(o.warmup >= 0 && o.warmup <= 1000, "--warmup must be in 0..1000");
  DIT_CHECK(o.rounds >= 1 && o.rounds <= 1000, "--rounds must be in 1..1000");
  DIT_CHECK(o.threads >= 1 && o.threads <= 4096, "-t/--threads must be in 1..4096");
  DIT_CHECK(o.gemm_runs >= 1 && o.gemm_runs <= 1000, "--gemm-runs must be in 1..1000");
  DIT_CHECK(std::isfinite(o.guidance), "--guidance must be a finite number");
  DIT_CHECK(o.layers >= 0 && o.layers <= 1024, "--layers must be in 0..1024 (0: the preset's)");
  DIT_CHECK(o.text_layers >= 0 && o.text_layers <= 1024, "--text-layers must be in 0..1024 (0: the preset's)");
  DIT_CHECK(o.sp_min_tokens >= 0, "--sp-min-tokens must be >= 0");
  DIT_CHECK(o.ulysses_chunks >= 0 && o.ulysses_chunks <= 64, "--ulysses-chunks must be in 1..64 (0: the default)");
  DIT_CHECK(o.nnodes <= 4096, "--nnodes must be in 1..4096");
  if (!o.preset.empty()) {
    const auto presets = model_presets();
    std::string names;
    for (const auto& p : presets) names += (names.empty() ? "" : ", ") + p;
    DIT_CHECK(std::find(presets.begin(), presets.end(), o.preset) != presets.end(),
              "--preset: unknown preset '" << o.preset << "' (available: " << names << ")");
  }
  const auto mkn = split_list(o.gemm);
  DIT_CHECK(mkn.size() == 3, "--gemm needs M,K,N, got '" << o.gemm << "'");
  for (const auto& x : mkn) parse_count(x, "--gemm", 1, 65536);
  for (const auto& x : split_list(o.sizes)) parse_count(x, "--size", 8, 8192);
  for (const auto& d : split_list(o.dtypes)) {  // --load-only computes nothing: any type it can load
    if (o.load_only) {
      try {
        parse_dtype(d);
      } catch (const Error& e) {
        DIT_FAIL("--dtype: " << e.what());
      }
    } else {
      parse_compute_type("--dtype", d);
    }
  }
  if (!o.output.empty()) {
    const fs::path parent = fs::path(o.output).has_parent_path() ? fs::path(o.output).parent_path() : fs::path(".");
    DIT_CHECK(fs::is_directory(parent), "--output: directory '" << parent.string() << "' does not exist");
    DIT_CHECK(!fs::is_directory(o.output), "--output: '" << o.output << "' is a directory");
  }
  DIT_CHECK(!split_list(o.layouts).empty(), "--layouts: expected one or more layouts (e.g. serial,cfg2,u2)");
  DIT_CHECK(!split_list(o.dtypes).empty(), "--dtype: expected f32, bf16 or both");
  const int cores = int(std::max(1u, std::thread::hardware_concurrency())), most = std::max(64, 4 * cores);
  for (const auto& l : split_list(o.layouts)) {
    const int world = parse_layout(l).deg.world();
    DIT_CHECK(world <= most, "--layouts " << l << ": " << world << " ranks are too many for this machine's " << cores
                                          << " cores (at most " << most << ")");
  }
}

}  // namespace dit::bench
