// dit-t5-bench: time the T5 v1.1 text encoder (T5-XXL dimensions, fewer layers) and print
// one JSON document on stdout.
//
//   dit-t5-bench --layers 2 --tokens 120,300 --dtype f32,bf16 --batch 1,2
//
// The random encoder (models/t5/make_t5.h: d_model 4096, 64 heads × 64, d_ff 10240, vocab
// 32128, --layers deep) is created once in --cache and reused. Per (dtype, tokens, batch):
// seconds per encode (median of --runs after --warmup), GFLOP per encode (every matmul
// 2·m·k·n and attention 4·B·H·L²·d_kv), GFLOP/s, a oneDNN GEMM of the encoder's largest
// shape (M = batch·tokens, K = d_model, N = d_ff, prepacked weights: the best case) timed in
// the same process on the same threads, taking turns with the encodes, the ratio of the two
// (median over the runs of each encode against the GEMM timed just before it: load from
// other processes drifts over seconds on a shared machine), and a breakdown (linear, attention, norm/element-wise:
// runtime/profile.h) with the matmuls' and attention's own ratios to the GEMM. Memory per dtype: RSS and PSS with the
// weights resident, after T5Encoder::drop_resident_pages(), after destroying the encoder and
// after malloc_trim; peak RSS.
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "models/t5/make_t5.h"
#include "models/t5/t5_encoder.h"
#include "runtime/engine.h"
#include "runtime/environment.h"
#include "runtime/error.h"
#include "runtime/gemm_probe.h"
#include "runtime/profile.h"
#include "tools/parse_args.h"

using namespace dit;
using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

struct Opts {
  std::string preset = "xxl", cache_dir, tokens = "120,300", dtypes, batches = "1,2", gemm = "auto",
              output;
  int layers = 2, threads = 0, runs = 5, warmup = 1, gemm_runs = 2, shards = 2;
};

std::vector<int64_t> split_ints(const std::string& s, const char* flag) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) {
    if (x.empty()) continue;
    char* end = nullptr;
    const long long v = std::strtoll(x.c_str(), &end, 10);
    DIT_CHECK(*end == 0 && v >= 1, flag << ": expected positive integers separated by commas, found '" << s << "'");
    out.push_back(v);
  }
  DIT_CHECK(!out.empty(), flag << ": empty list");
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// "Rss:" and "Pss:" of /proc/self/smaps_rollup, in MB.
std::pair<double, double> rss_pss_mb() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  double rss = -1, pss = -1;
  while (std::getline(f, line)) {
    if (line.rfind("Rss:", 0) == 0) rss = std::stod(line.substr(4)) / 1024.0;
    if (line.rfind("Pss:", 0) == 0) pss = std::stod(line.substr(4)) / 1024.0;
  }
  return {rss, pss};
}

json memory_now() {
  const auto [rss, pss] = rss_pss_mb();
  return {{"rss_mb", rss}, {"pss_mb", pss}};
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

MakeT5Options preset(const Opts& o) {
  DIT_CHECK(o.preset == "xxl" || o.preset == "tiny", "--preset: expected xxl or tiny, found '" << o.preset << "'");
  MakeT5Options m = o.preset == "xxl" ? MakeT5Options::xxl() : MakeT5Options::tiny();
  m.layers = o.layers;
  m.shards = o.shards;
  return m;
}

std::string ensure_model(const Opts& o) {
  MakeT5Options m = preset(o);
  const std::string base = o.cache_dir.empty()
                               ? cache_dir("DIT_BENCH_CACHE", "bench", fs::temp_directory_path() / "dit-gen-bench")
                               : o.cache_dir;
  const std::string dir = base + "/t5-" + o.preset + "-L" + std::to_string(o.layers);
  if (fs::exists(dir + "/text_encoder/config.json")) return dir;
  std::fprintf(stderr, "dit-t5-bench: creating the random T5-%s encoder (%d layers) in %s\n", o.preset.c_str(),
               o.layers, dir.c_str());
  m.out_dir = dir;
  m.tokenizer = false;
  make_t5(m);
  return dir;
}

json bench_one(T5Encoder& enc, int64_t B, int64_t L, const Opts& o, DType dt) {
  const T5Config& c = enc.weights().cfg;
  enc.prepare(B, L);
  std::mt19937 g(uint32_t(B * 1000 + L));
  std::uniform_int_distribution<int64_t> id(3, std::min<int64_t>(c.vocab_size, 32000) - 1);
  std::vector<int64_t> ids(size_t(B * L)), mask(size_t(B * L), 1);
  for (auto& v : ids) v = id(g);
  std::vector<float> out(size_t(B * L * c.d_model));
  int64_t M = B * L, K = c.d_model, N = c.d_ff;
  if (o.gemm != "auto") {
    const std::vector<int64_t> mkn = split_ints(o.gemm, "--gemm");
    DIT_CHECK(mkn.size() == 3, "--gemm: expected auto or M,K,N");
    M = mkn[0], K = mkn[1], N = mkn[2];
  }
  GemmProbe probe(M, K, N, dt);
  for (int i = 0; i < o.warmup; ++i) enc.encode(ids.data(), mask.data(), out.data());
  // The GEMM and the encoder take turns, so that both see the same machine (other load
  // drifts over seconds on a shared machine).
  std::vector<double> secs, gemms, ratios;
  profile::reset();
  for (int i = 0; i < o.runs; ++i) {
    const double g = median(probe.run(o.gemm_runs));
    gemms.push_back(g);
    profile::enable(true);
    const auto t0 = std::chrono::steady_clock::now();
    enc.encode(ids.data(), mask.data(), out.data());
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    profile::enable(false);
    ratios.push_back(enc.flops() / 1e9 / secs.back() / g);  // this encode against the GEMM just before it
  }
  const profile::Totals tot = profile::totals();
  const double gemm = median(gemms);
  const double s = median(secs), gflop = enc.flops() / 1e9;
  json r = {{"dtype", dtype_name(dt)},
            {"tokens", L},
            {"batch", B},
            {"seconds", s},
            {"seconds_all", secs},
            {"gflop_per_encode", gflop},
            {"gflops", gflop / s},
            {"gemm_mkn", std::to_string(M) + "," + std::to_string(K) + "," + std::to_string(N)},
            {"gemm_gflops", gemm},
            {"ratio_to_gemm", median(ratios)},
            {"ratio_all", ratios}};
  json br;
  for (int k = 0; k < profile::kCats; ++k) br[profile::cat_name(profile::Cat(k))] = tot.seconds[k] / o.runs;
  r["breakdown_s"] = br;
  // The matmuls alone (all FLOPs but attention's) against the GEMM.
  const double attn_gflop = 4.0 * B * c.num_heads * L * L * c.d_kv * c.num_layers / 1e9;
  const double lin_s = tot.seconds[int(profile::Cat::Linear)] / o.runs;
  if (lin_s > 0) r["linear_ratio_to_gemm"] = (gflop - attn_gflop) / lin_s / gemm;
  const double att_s = tot.seconds[int(profile::Cat::Attention)] / o.runs;
  if (att_s > 0) r["attention_ratio_to_gemm"] = attn_gflop / att_s / gemm;
  std::fprintf(stderr, "dit-t5-bench: %s, %lld tokens, batch %lld: %.3f s, %.0f GFLOP/s (GEMM %.0f, ratio %.2f)\n",
               dtype_name(dt), static_cast<long long>(L), static_cast<long long>(B), s, gflop / s, gemm,
               median(ratios));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  o.dtypes = compute_supported(DType::BF16) ? "f32,bf16" : "f32";
  CLI::App app{"dit-t5-bench: time the T5 v1.1 text encoder (random weights, T5-XXL dimensions) at several token "
               "counts, batches and dtypes; prints one JSON document"};
  app.add_option("--preset", o.preset, "xxl (d_model 4096, 64 heads x 64, d_ff 10240, vocab 32128) or tiny (tests)")
      ->capture_default_str();
  app.add_option("--layers", o.layers, "encoder depth (the full XXL encoder has 24: 19 GB f32)")->capture_default_str();
  app.add_option("--shards", o.shards, "safetensors shards of a newly created model")->capture_default_str();
  app.add_option("--cache", o.cache_dir,
                 "where the model is created once and reused ($DIT_BENCH_CACHE, else ~/.cache/dit-gen/bench)");
  app.add_option("--tokens", o.tokens, "sequence lengths, comma-separated")->capture_default_str();
  app.add_option("--batch", o.batches, "batch sizes, comma-separated")->capture_default_str();
  app.add_option("--dtype", o.dtypes, "compute types, comma-separated: f32, bf16 (default: both where the CPU computes bf16)")
      ->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads, 1..4096 (default: all cores)")->check(CLI::Range(1, 4096));
  app.add_option("--runs", o.runs, "timed encodes per case (median reported)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed encodes first")->capture_default_str();
  app.add_option("--gemm", o.gemm, "reference GEMM M,K,N, or auto: batch x tokens, d_model, d_ff")->capture_default_str();
  app.add_option("--gemm-runs", o.gemm_runs, "timed runs of the reference GEMM before each timed encode")
      ->capture_default_str();
  app.add_option("-o,--output", o.output, "also write the JSON to this file");
  if (auto rc = dit::parse_args(app, argc, argv, "dit-t5-bench")) return *rc;  // errors: one line
  try {
    DIT_CHECK(o.layers >= 1 && o.layers <= 24, "--layers must be in 1..24");
    DIT_CHECK(o.runs >= 1 && o.warmup >= 0 && o.gemm_runs >= 1, "--runs >= 1, --warmup >= 0, --gemm-runs >= 1");
    if (o.threads != 0) set_num_threads(o.threads);
    const std::vector<int64_t> tokens = split_ints(o.tokens, "--tokens"), batches = split_ints(o.batches, "--batch");
    std::vector<DType> dtypes;
    std::stringstream ss(o.dtypes);
    for (std::string d; std::getline(ss, d, ',');)
      if (!d.empty()) dtypes.push_back(parse_compute_type("--dtype", d));
    const std::string model = ensure_model(o);
    json doc;
    doc["tool"] = "dit-t5-bench";
    doc["model"] = model;
    json runs = json::array(), memory = json::array();
    for (DType dt : dtypes) {
      json mem;
      mem["dtype"] = dtype_name(dt);
      mem["before_load"] = memory_now();
      {
        auto w = std::make_shared<const T5Weights>(T5Weights::load(model + "/text_encoder", dt));
        if (!doc.contains("config")) {
          const T5Config& c = w->cfg;
          doc["config"] = {{"d_model", c.d_model}, {"num_heads", c.num_heads}, {"d_kv", c.d_kv}, {"d_ff", c.d_ff},
                           {"num_layers", c.num_layers}, {"vocab_size", c.vocab_size}};
          doc["threads"] = num_threads();
        }
        T5Encoder enc(w);
        for (int64_t L : tokens)
          for (int64_t B : batches) runs.push_back(bench_one(enc, B, L, o, dt));
        mem["after_encoding"] = memory_now();
        mem["dropped_bytes"] = enc.drop_resident_pages();
        mem["after_drop_resident_pages"] = memory_now();
      }
      mem["after_destroying_the_encoder"] = memory_now();
      malloc_trim(0);  // glibc keeps freed medium blocks (its mmap threshold adapts upwards)
      mem["after_malloc_trim"] = memory_now();
      memory.push_back(mem);
    }
    doc["runs"] = runs;
    doc["memory"] = memory;
    doc["peak_rss_mb"] = peak_rss_mb();
    const std::string text = doc.dump(1);
    if (!o.output.empty()) {
      std::ofstream f(o.output);
      f << text << "\n";
      DIT_CHECK(f.good(), "cannot write " << o.output);
    }
    std::printf("%s\n", text.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dit-t5-bench: error: %s\n", e.what());
    return 1;
  }
}
