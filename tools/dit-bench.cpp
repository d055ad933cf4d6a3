// dit-bench: time the denoising step (transformer forward + token gather + CFG exchange +
// sampler step; no VAE) for given sizes, dtypes and parallel layouts, and print one JSON
// document on stdout.
//
//   dit-bench --preset xl --layers 4 --size 256,512 --dtype f32,bf16 --steps 5 --warmup 1
//   dit-bench --preset xl --layers 2 --size 512 --layouts serial,cfg2,u2,r2,u2r2
//   dit-bench --preset pixart-xl --layers 2 --text-layers 1 --size 512,1024 --layouts serial,u2,r2
//   dit-bench --model /models/DiT-XL-2-256 --layouts serial-all
//
// Every (size, dtype, layout) runs in fresh processes started with the project's launcher
// (parallel/launcher.h): `world` ranks, each with --threads threads (default 1) and pinned
// to core (local_rank % cores), so the speedups of one invocation are ratios on the same
// machine state. `serial-all` is one rank, unpinned, with all cores' threads.
//
// Per run: step time (median of --steps after --warmup untimed steps), model FLOPs per step
// (matmuls and attention, the whole model), achieved GFLOP/s, a oneDNN f32/bf16 GEMM
// (--gemm M,K,N, prepacked weights) timed in the same processes on the same threads (all
// ranks at once), the utilisation (achieved / (GEMM × ranks)), a breakdown of rank 0's step
// (runtime/profile.h), bytes sent per step, and per-rank peak RSS and PSS.
#include <CLI/CLI.hpp>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "models/dit_gen.h"
#include "models/make_model.h"
#include "parallel/distributed_context.h"
#include "parallel/launcher.h"
#include "parallel/mesh.h"
#include "runtime/engine.h"
#include "runtime/gemm_probe.h"
#include "runtime/error.h"
#include "runtime/json_config.h"
#include "runtime/profile.h"
#include "runtime/tensor.h"
#include "tools/parse_args.h"

using namespace dit;
using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

struct Opts {
  std::string model, preset, cache_dir, layouts = "serial", sizes, dtypes = "f32", output;
  int64_t sp_min_tokens = 0;
  int layers = 0, text_layers = 0, steps = 5, warmup = 1, threads = 1, gemm_runs = 5;
  double guidance = 4.0;
  std::string gemm = "1024,1152,4608";
  // worker
  std::string qkv = "auto";
  bool worker = false;
  std::string layout, result_dir, dtype = "f32";
  int size = 0;
};

struct Layout {
  std::string name;
  MeshDegrees deg;
  bool all_cores = false;
};

Layout parse_layout(const std::string& s) {
  Layout l;
  l.name = s;
  if (s == "serial") return l;
  if (s == "serial-all") {
    l.all_cores = true;
    return l;
  }
  std::regex part("(cfg|tp|u|r)([0-9]+)");
  std::string rest = s;
  std::smatch m;
  bool any = false;
  while (!rest.empty()) {
    DIT_CHECK(std::regex_search(rest, m, part) && m.position(0) == 0,
              "layout '" << s << "': expected serial, serial-all or a combination of cfgN, uN, rN, tpN (e.g. cfg2u2, u2r2, tp2)");
    DIT_CHECK(m[2].length() <= 4, "layout '" << s << "': degree " << m[2].str() << " is too large");
    const int n = std::stoi(m[2].str());
    DIT_CHECK(n >= 1, "layout '" << s << "': degree must be >= 1");
    if (m[1] == "cfg") {
      DIT_CHECK(n <= 2, "layout '" << s << "': the CFG degree is 1 or 2");
      l.deg[Axis::Cfg] = n;
    } else if (m[1] == "tp") {
      l.deg[Axis::Tp] = n;
    } else if (m[1] == "u") {
      l.deg[Axis::Ulysses] = n;
    } else {
      l.deg[Axis::Ring] = n;
    }
    any = true;
    rest = m.suffix().str();
  }
  DIT_CHECK(any, "empty layout");
  return l;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ','))
    if (!x.empty()) out.push_back(x);
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Resident now (VmRSS): every page this process maps counts, shared or not — the memory
// a rank would need on a machine of its own (peak_rss also counts load-time transients).
double rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return -1;
}

double pss_mb() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("Pss:", 0) == 0) return std::stod(line.substr(4)) / 1024.0;  // kB
  return -1;
}

double maxrss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // kB on Linux
}

// ---------------------------------------------------------------------------------- worker
int run_worker(const Opts& o) {
  const Layout lay = parse_layout(o.layout);
  LaunchOptions lo;
  lo.world_size = lay.deg.world();
  lo.threads = o.threads;
  LaunchEnv env = detect_launch_env(lo);
  std::shared_ptr<ProcessGroup> world;
  try {
    const std::vector<int> cpus = allowed_cpus();
    int threads = env.threads > 0 ? env.threads : o.threads;
    if (lay.all_cores) {
      threads = o.threads > 1 ? o.threads : int(cpus.size());
    } else {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpus[size_t(env.local_rank) % cpus.size()], &set);
      DIT_CHECK(sched_setaffinity(0, sizeof(set), &set) == 0, "sched_setaffinity failed");
    }
    set_num_threads(threads);

    PipelineOptions po;
    po.model_dir = o.model;
    po.dtype = parse_dtype(o.dtype);
    po.qkv = o.qkv == "fused" ? QkvProjection::Fused : o.qkv == "split" ? QkvProjection::Split : QkvProjection::Auto;
    std::shared_ptr<DeviceMesh> mesh;
    if (lay.deg.world() > 1) {
      world = connect_world(env);
      mesh = std::make_shared<DeviceMesh>(world, lay.deg);
      DistributedOptions dopt;
      if (o.sp_min_tokens > 0) dopt.sp_min_tokens = o.sp_min_tokens;
      po.parallel = make_distributed_context(mesh, dopt);
    }
    auto pipe = Pipeline::load(po);

    // GEMM throughput on these threads, all ranks at once (as they run the model).
    std::vector<int64_t> mkn;
    for (auto& x : split_list(o.gemm)) mkn.push_back(std::stoll(x));
    DIT_CHECK(mkn.size() == 3, "--gemm needs M,K,N");
    // Timed before and after the denoising loop (medians over both), so a change of machine
    // load during the run shows in the reference too.
    std::vector<double> g32s, g16s;
    auto time_gemms = [&] {
      if (world) world->barrier();
      for (double g : GemmProbe(mkn[0], mkn[1], mkn[2], DType::F32).run(o.gemm_runs)) g32s.push_back(g);
      for (double g : GemmProbe(mkn[0], mkn[1], mkn[2], DType::BF16).run(o.gemm_runs)) g16s.push_back(g);
      if (world) world->barrier();
    };
    time_gemms();

    Request req;
    req.prompt = pipe->info().text_to_image ? "a red fox in the snow" : "1";  // "1": a class id every DiT has
    req.seed = 42;
    req.steps = o.warmup + o.steps;
    req.guidance_scale = o.guidance;
    req.decode = false;
    const int size = o.size > 0 ? o.size : pipe->info().default_width;
    req.width = req.height = size;
    req.resolution_binning = !pipe->info().resolution_binning;  // the size asked for, not its aspect-ratio bin
    std::vector<double> step_s;
    profile::enable(true);
    profile::reset();
    const Result res = pipe->generate(req, [&](const StepInfo& si) {
      if (si.step <= o.warmup) {
        if (si.step == o.warmup) profile::reset();
        return;
      }
      step_s.push_back(si.step_seconds);
    });
    const profile::Totals tot = profile::totals();
    profile::enable(false);
    time_gemms();
    const double g32 = median(g32s), g16 = median(g16s);

    // Per-rank result.
    json r;
    r["rank"] = env.rank;
    r["local_rank"] = env.local_rank;
    r["threads"] = num_threads();
    if (!lay.all_cores) r["cpu"] = cpus[size_t(env.local_rank) % cpus.size()];
    r["step_seconds"] = step_s;
    r["step_median_s"] = median(step_s);
    r["gemm_f32_gflops"] = g32;
    r["gemm_bf16_gflops"] = g16;
    const double n = double(std::max<size_t>(1, step_s.size()));
    json br;
    double claimed = 0;
    for (int c = 0; c < profile::kCats; ++c) {
      br[profile::cat_name(profile::Cat(c))] = tot.seconds[c] / n;
      claimed += tot.seconds[c] / n;
    }
    br["other"] = std::max(0.0, median(step_s) - claimed);  // sampler, unpatchify, guidance, loop
    r["breakdown_s"] = br;
    r["bytes_sent_per_step"] = double(tot.bytes_sent) / n;
    r["peak_rss_mb"] = maxrss_mb();
    r["pss_mb"] = pss_mb();
    r["rss_mb"] = rss_mb();
    const ModelInfo& info = pipe->info();
    const int64_t m = info.size_multiple, tokens = int64_t(res.request.gen_height / m) * (res.request.gen_width / m);
    r["tokens"] = tokens;
    r["size"] = size;
    const ModelFlops f = pipe->flops();  // the whole model, at this run's batch and tokens
    r["flops"] = {{"linear", f.linear},
                  {"attention", f.attention},
                  {"cross_attention", f.cross_attention},
                  {"conditioning", f.conditioning},
                  {"per_request", f.per_request}};
    r["model"] = {{"family", info.family}, {"layers", info.layers}, {"hidden", info.hidden}, {"heads", info.heads}};
    // a checksum of the final latents, to compare dtypes and layouts
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < res.latents.numel(); ++i) {
      sum += res.latents.f32()[i];
      sq += double(res.latents.f32()[i]) * res.latents.f32()[i];
    }
    r["latents_sum"] = sum;
    r["latents_l2"] = std::sqrt(sq);
    if (env.rank == 0 && !o.result_dir.empty()) {
      // Final latents, for the driver's dtype comparison.
      std::ofstream lf(o.result_dir + "/latents.f32", std::ios::binary);
      lf.write(static_cast<const char*>(res.latents.data()), std::streamsize(res.latents.nbytes()));
    }
    if (world) world->barrier();  // every rank has measured its memory before any exits
    if (!o.result_dir.empty()) {
      std::ofstream out(o.result_dir + "/rank" + std::to_string(env.rank) + ".json");
      out << r.dump() << "\n";
      DIT_CHECK(out.good(), "cannot write the result to " << o.result_dir);
    } else {
      std::printf("%s\n", r.dump(1).c_str());
    }
    mesh.reset();
    if (world) world->shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dit-bench: error: %s\n", e.what());
    if (world)
      world->abort(e.what());
    else if (env.world > 1)
      report_rank_failure(env, e.what());
    return 1;
  }
}

// ---------------------------------------------------------------------------------- driver
std::string default_cache_dir() {
  if (const char* c = std::getenv("DIT_BENCH_CACHE"); c && *c) return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/dit-gen/bench";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/dit-gen/bench";
  return (fs::temp_directory_path() / "dit-gen-bench").string();
}

std::string ensure_model(const Opts& o) {
  if (!o.model.empty()) return o.model;
  const std::string dir = (o.cache_dir.empty() ? default_cache_dir() : o.cache_dir) + "/" + o.preset +
                          (o.layers > 0 ? "-L" + std::to_string(o.layers) : "") +
                          (o.text_layers > 0 ? "-T" + std::to_string(o.text_layers) : "");
  if (fs::exists(dir + "/model_index.json")) return dir;
  fs::create_directories(fs::path(dir).parent_path());
  std::fprintf(stderr, "dit-bench: creating the %s preset model (random weights) in %s\n", o.preset.c_str(),
               dir.c_str());
  MakeModelOptions mo;
  mo.preset = o.preset;
  mo.out_dir = dir;
  mo.layers = o.layers;
  mo.text_layers = o.text_layers;
  make_model(mo);
  return dir;
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  DIT_CHECK(f.good(), "missing worker result " << path);
  return json::parse(f);
}

std::vector<float> read_latents(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f.good()) return {};
  std::vector<float> v(size_t(f.tellg()) / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * 4));
  return v;
}

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.empty() || a.size() != b.size()) return -1;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

int run_driver(const Opts& o, const char* argv0) {
  const std::string model = ensure_model(o);
  const Config tcfg = Config::load(model + "/transformer/config.json");
  std::vector<int> sizes;
  for (auto& s : split_list(o.sizes)) sizes.push_back(std::stoi(s));
  if (sizes.empty()) sizes.push_back(0);  // the model's default
  const std::vector<std::string> layouts = split_list(o.layouts), dtypes = split_list(o.dtypes);
  for (auto& l : layouts) parse_layout(l);  // fail early
  for (auto& d : dtypes) parse_dtype(d);

  const fs::path tmp = fs::temp_directory_path() / ("dit-bench-" + std::to_string(getpid()));
  fs::create_directories(tmp);
  json doc;
  doc["tool"] = "dit-bench";
  doc["model"] = model;
  doc["model_config"] = {{"pipeline", Config::load(model + "/model_index.json").get_string("_class_name", "")},
                         {"layers", tcfg.get_int("num_layers", 28)},
                         {"heads", tcfg.get_int("num_attention_heads", 16)},
                         {"head_dim", tcfg.get_int("attention_head_dim", 72)},
                         {"patch", tcfg.get_int("patch_size", 2)}};
  doc["cpus"] = allowed_cpus().size();
  doc["steps"] = o.steps;
  doc["warmup"] = o.warmup;
  doc["threads_per_rank"] = o.threads;
  doc["guidance_scale"] = o.guidance;
  doc["gemm_mkn"] = o.gemm;
  doc["qkv"] = o.qkv;
  json runs = json::array();
  std::map<std::string, std::vector<float>> latents_of;  // "layout size" -> f32 run's final latents
  int rc_all = 0;
  for (int size : sizes)
    for (const std::string& dtype : dtypes) {
      std::vector<float> serial_latents, f32_latents;
      double serial_step = 0;
      for (const std::string& lname : layouts) {
        const Layout lay = parse_layout(lname);
        const int world = lay.deg.world();
        const fs::path rdir = tmp / (lname + "-" + dtype + "-" + std::to_string(size));
        fs::create_directories(rdir);
        std::vector<std::string> args = {argv0,          "--worker",  "--model",     model,
                                         "--layout",     lname,       "--dtype",     dtype,
                                         "--size",       std::to_string(size),       "--steps",
                                         std::to_string(o.steps),     "--warmup",    std::to_string(o.warmup),
                                         "--threads",    std::to_string(o.threads),  "--guidance",
                                         std::to_string(o.guidance),  "--gemm",      o.gemm,
                                         "--gemm-runs",  std::to_string(o.gemm_runs), "--result-dir",
                                         rdir.string(),  "--qkv",     o.qkv,
                                         "--sp-min-tokens", std::to_string(o.sp_min_tokens)};
        std::vector<char*> av;
        for (auto& a : args) av.push_back(a.data());
        av.push_back(nullptr);
        LaunchOptions lo;
        lo.world_size = world;
        lo.threads = lay.all_cores ? int(allowed_cpus().size()) : o.threads;
        lo.announce = false;
        lo.program = "dit-bench";
        std::fprintf(stderr, "dit-bench: %s, %s, size %s, %d rank(s)...\n", lname.c_str(), dtype.c_str(),
                     size > 0 ? std::to_string(size).c_str() : "default", world);
        const int rc = launch_local_workers(int(args.size()), av.data(), world, 0, world, "", lo);
        json run;
        run["layout"] = lname;
        run["ranks"] = world;
        run["dtype"] = dtype;
        if (rc != 0) {
          run["error"] = "workers exited with code " + std::to_string(rc);
          runs.push_back(run);
          rc_all = rc;
          continue;
        }
        std::vector<json> ranks;
        for (int r = 0; r < world; ++r) ranks.push_back(read_json((rdir / ("rank" + std::to_string(r) + ".json")).string()));
        const json& r0 = ranks[0];
        const double step = r0["step_median_s"].get<double>();
        const json& F = r0["flops"];
        const double fa = F["attention"].get<double>(), flin = F["linear"].get<double>();
        const double fx = F["cross_attention"].get<double>();
        const double fl = flin + fa + fx + F["conditioning"].get<double>();
        const double gemm = r0[dtype == "bf16" ? "gemm_bf16_gflops" : "gemm_f32_gflops"].get<double>();
        const int rank_threads = r0["threads"].get<int>();
        run["threads_per_rank"] = rank_threads;
        run["size"] = r0["size"];
        run["tokens"] = r0["tokens"];
        run["step_s"] = step;
        run["step_s_all"] = r0["step_seconds"];
        run["model_gflop_per_step"] = fl / 1e9;
        run["achieved_gflops"] = fl / step / 1e9;
        run["gemm_f32_gflops_per_rank"] = r0["gemm_f32_gflops"];
        run["gemm_bf16_gflops_per_rank"] = r0["gemm_bf16_gflops"];
        run["utilisation"] = fl / step / 1e9 / (gemm * world);
        json br = r0["breakdown_s"];
        run["breakdown_s_rank0"] = br;
        const double ta = br["attention"].get<double>(), tl = br["linear"].get<double>();
        const double tx = br["cross_attention"].get<double>();
        // Per-rank work is 1/world of the model's (every layout splits the work evenly).
        if (ta > 0) {
          run["attention_gflops_rank0"] = fa / world / ta / 1e9;
          run["attention_utilisation"] = fa / world / ta / 1e9 / gemm;
        }
        if (tx > 0) {  // text cross-attention (PixArt), reported on its own
          run["cross_attention_gflop_per_step"] = fx / 1e9;
          run["cross_attention_gflops_rank0"] = fx / world / tx / 1e9;
          run["cross_attention_utilisation"] = fx / world / tx / 1e9 / gemm;
        }
        if (tl > 0) {
          run["linear_gflops_rank0"] = flin / world / tl / 1e9;
          run["linear_utilisation"] = flin / world / tl / 1e9 / gemm;
        }
        double bytes = 0, pss_sum = 0;
        json rss = json::array(), pss = json::array(), cur_rss = json::array();
        for (const json& r : ranks) {
          bytes += r["bytes_sent_per_step"].get<double>();
          pss_sum += r["pss_mb"].get<double>();
          rss.push_back(r["peak_rss_mb"]);
          pss.push_back(r["pss_mb"]);
          cur_rss.push_back(r["rss_mb"]);
        }
        run["bytes_sent_per_step_all_ranks"] = bytes;
        if (world > 1) {  // each rank's own view: who waits for whom
          json per = json::array();
          for (const json& r : ranks)
            per.push_back({{"rank", r["rank"]}, {"cpu", r.contains("cpu") ? r["cpu"] : json()},
                           {"step_s", r["step_median_s"]}, {"gemm_f32_gflops", r["gemm_f32_gflops"]},
                           {"breakdown_s", r["breakdown_s"]}});
          run["per_rank"] = per;
        }
        run["peak_rss_mb_per_rank"] = rss;
        run["rss_mb_per_rank"] = cur_rss;
        run["pss_mb_per_rank"] = pss;
        run["pss_mb_sum"] = pss_sum;
        const std::vector<float> lat = read_latents((rdir / "latents.f32").string());
        if (lname == "serial" && serial_step == 0) {  // the baseline of the layouts after it
          serial_latents = lat;
          serial_step = step;
        } else if (serial_step > 0) {
          run["speedup_vs_serial"] = serial_step / step;
          run["latents_rel_diff_vs_serial"] = rel_diff(lat, serial_latents);
        }
        // bf16 vs the f32 run of the same layout and size, when both were asked for.
        const std::string key = lname + " " + std::to_string(size);
        if (dtype == "f32") latents_of[key] = lat;
        else if (latents_of.count(key)) run["latents_rel_diff_vs_f32"] = rel_diff(lat, latents_of[key]);
        runs.push_back(run);
        fs::remove_all(rdir);
      }
    }
  // Pair bf16 runs with the f32 run of the same layout and size.
  for (json& r : runs) {
    if (!r.contains("dtype") || r["dtype"] != "bf16" || r.contains("error")) continue;
    for (const json& f : runs)
      if (f["dtype"] == "f32" && !f.contains("error") && f["layout"] == r["layout"] && f["size"] == r["size"])
        r["speedup_vs_f32"] = f["step_s"].get<double>() / r["step_s"].get<double>();
  }
  doc["runs"] = runs;
  fs::remove_all(tmp);
  const std::string text = doc.dump(1);
  if (!o.output.empty()) {
    std::ofstream f(o.output);
    f << text << "\n";
  }
  std::printf("%s\n", text.c_str());
  return rc_all;
}

}  // namespace

// Every option, before a model is created or a rank started (bad values used to reach the
// ranks: several lines per error, a thousand processes for u1000, a SIGSEGV at -t 100000).
int64_t parse_count(const std::string& s, const char* flag, int64_t lo, int64_t hi) {
  DIT_CHECK(!s.empty() && s.size() <= 12 && s.find_first_not_of("0123456789") == std::string::npos,
            flag << ": '" << s.substr(0, 40) << "' is not a whole number");
  const int64_t v = std::stoll(s);
  DIT_CHECK(v >= lo && v <= hi, flag << ": " << v << " is not in " << lo << ".." << hi);
  return v;
}

void check_options(const Opts& o) {
  DIT_CHECK(o.steps >= 1 && o.steps <= 10000, "--steps must be in 1..10000");
  DIT_CHECK(o.warmup >= 0 && o.warmup <= 1000, "--warmup must be in 0..1000");
  DIT_CHECK(o.threads >= 1 && o.threads <= 4096, "-t/--threads must be in 1..4096");
  DIT_CHECK(o.gemm_runs >= 1 && o.gemm_runs <= 1000, "--gemm-runs must be in 1..1000");
  DIT_CHECK(std::isfinite(o.guidance), "--guidance must be a finite number");
  DIT_CHECK(o.layers >= 0 && o.layers <= 1024, "--layers must be in 0..1024 (0: the preset's)");
  DIT_CHECK(o.text_layers >= 0 && o.text_layers <= 1024, "--text-layers must be in 0..1024 (0: the preset's)");
  DIT_CHECK(o.sp_min_tokens >= 0, "--sp-min-tokens must be >= 0");
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
  for (const auto& d : split_list(o.dtypes)) parse_dtype(d);
  if (!o.output.empty()) {
    const fs::path parent = fs::path(o.output).has_parent_path() ? fs::path(o.output).parent_path() : fs::path(".");
    DIT_CHECK(fs::is_directory(parent), "--output: directory '" << parent.string() << "' does not exist");
    DIT_CHECK(!fs::is_directory(o.output), "--output: '" << o.output << "' is a directory");
  }
  const int cores = int(std::max(1u, std::thread::hardware_concurrency())), most = std::max(64, 4 * cores);
  for (const auto& l : split_list(o.layouts)) {
    const int world = parse_layout(l).deg.world();
    DIT_CHECK(world <= most, "--layouts " << l << ": " << world << " ranks are too many for this machine's " << cores
                                          << " cores (at most " << most << ")");
  }
}

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"dit-bench: time the DiT denoising step for sizes, dtypes and parallel layouts (JSON on stdout)"};
  app.add_option("-m,--model", o.model, "diffusers DiT pipeline directory");
  app.add_option("--preset", o.preset,
                 "random-weight preset instead of --model: tiny, small, demo, xl (DiT), pixart-demo, pixart-xl");
  app.add_option("--layers", o.layers, "override the preset's depth (xl at 28 layers is 2.7 GB f32)");
  app.add_option("--text-layers", o.text_layers,
                 "override a PixArt preset's T5 depth (pixart-xl's T5-XXL at 24 layers is 19 GB f32; its encoding "
                 "is not part of the timed step)");
  app.add_option("--cache", o.cache_dir, "where preset models are created and reused ($DIT_BENCH_CACHE, else ~/.cache/dit-gen/bench)");
  app.add_option("--size", o.sizes, "image sizes in pixels, comma-separated (tokens = (size/16)^2 for DiT/2); default: the model's");
  app.add_option("--dtype", o.dtypes, "compute types, comma-separated: f32, bf16")->capture_default_str();
  app.add_option("--layouts", o.layouts,
                 "comma-separated: serial (1 rank, pinned), serial-all (1 rank, all cores), or degrees like cfg2, u2, r2, "
                 "tp2, u2r2, cfg2u2, cfg2tp2")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "timed denoising steps (median reported)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads per rank (serial-all: all cores unless > 1)")->capture_default_str();
  app.add_option("--guidance", o.guidance, "guidance scale (> 1: CFG, batch 2)")->capture_default_str();
  app.add_option("--gemm", o.gemm, "M,K,N of the reference oneDNN GEMM")->capture_default_str();
  app.add_option("--gemm-runs", o.gemm_runs, "timed runs of the reference GEMM")->capture_default_str();
  app.add_option("-o,--output", o.output, "also write the JSON to this file");
  app.add_option("--qkv", o.qkv,
                 "fused: Q, K, V as one matmul over weights concatenated at load (a private copy per rank); split: "
                 "three matmuls over the shared memory-mapped weights; auto: split when the weights are used in place")
      ->check(CLI::IsMember({"auto", "fused", "split"}))
      ->capture_default_str();
  app.add_option("--sp-min-tokens", o.sp_min_tokens,
                 "tensor parallel: Megatron sequence parallelism from this many tokens x batch (default: dit-gen's)");
  app.add_flag("--worker", o.worker)->group("");
  app.add_option("--layout", o.layout)->group("");
  app.add_option("--result-dir", o.result_dir)->group("");
  if (auto rc = dit::parse_args(app, argc, argv, "dit-bench")) return *rc;
  try {
    DIT_CHECK(o.steps >= 1 && o.warmup >= 0 && o.threads >= 1, "--steps >= 1, --warmup >= 0, --threads >= 1");
    if (o.worker) {
      o.dtype = o.dtypes;
      o.size = o.sizes.empty() ? 0 : std::stoi(o.sizes);
      return run_worker(o);
    }
    if (o.model.empty() && o.preset.empty()) o.preset = "tiny";
    DIT_CHECK(o.model.empty() || o.preset.empty(), "--model and --preset are exclusive");
    check_options(o);
    return run_driver(o, argv[0]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dit-bench: error: %s\n", e.what());
    return 1;
  }
}
