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
// (parallel/launcher.h): `world` ranks, each with --threads threads (default 1), local rank r
// pinned to its own cores r*threads .. r*threads+threads-1 of the allowed set in placement
// order (one CPU per physical core while they suffice; parallel/placement.h; --no-pin to
// compare), so the speedups of one invocation are ratios
// on the same machine state. `serial-all` is one rank, unpinned, with all cores' threads.
//
// Several machines (tools/netbench.sh simulates them in network namespaces): the same
// command on each with --rendezvous redis://HOST:PORT/RUN --nnodes N --node-rank K; each
// layout's ranks are shared out evenly over the machines, `serial` runs on machine 0 alone,
// `serial-each` on every machine at once (the drivers meet first): one machine's step while
// the others are busy too, which on one box shares its memory bandwidth, caches and power as
// the layouts' simulated machines do. Machine 0's JSON has the step times.
//
// --rounds N runs the list of layouts N times in turn; "summary" has, per layout, dtype and
// size, the median step and the median of the speedups each round measured against its own
// serial run (machines are noisy: ratios within a round, medians over rounds).
//
// Ctrl-C, kill or a time limit (`timeout`) stops the runs: the document still comes, with the
// runs that finished and "interrupted_at" naming the run stopped; the exit code is 128 + the
// signal.
//
// Per run: step time (median of --steps after --warmup untimed steps), model FLOPs per step
// (matmuls and attention, the whole model), achieved GFLOP/s, a oneDNN f32/bf16 GEMM
// (--gemm M,K,N, prepacked weights) timed in the same processes on the same threads (all
// ranks at once), the utilisation (achieved / (GEMM × ranks)), a breakdown of rank 0's step
// (runtime/profile.h), bytes sent per step, and per-rank peak RSS and PSS.
#include <CLI/CLI.hpp>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "models/make_model.h"
#include "parallel/parallel_attention.h"
#include "parallel/launcher.h"
#include "parallel/mesh.h"
#include "parallel/placement.h"
#include "parallel/rendezvous.h"
#include "runtime/engine.h"
#include "runtime/environment.h"
#include "runtime/error.h"
#include "runtime/json_config.h"
#include "runtime/tensor.h"
#include "tools/bench/bench.h"
#include "tools/bench/report.h"
#include "tools/parse_args.h"

using namespace dit;
using json = nlohmann::ordered_json;
using namespace dit::bench;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------- driver
std::string ensure_model(const Opts& o) {
  if (!o.model.empty()) return o.model;
  const std::string base = o.cache_dir.empty()
                               ? cache_dir("DIT_BENCH_CACHE", "bench", fs::temp_directory_path() / "dit-gen-bench")
                               : o.cache_dir;
  const std::string dir = base + "/" + o.preset + (o.layers > 0 ? "-L" + std::to_string(o.layers) : "") +
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

// One measured run: a layout's ranks on this machine for one size, dtype and round.
struct RunPlan {
  std::string model, layout, dtype;
  int size = 0, round = 0;
  fs::path tmp;  // the driver's scratch directory
};

// Several machines: the rendezvous of one run, a name of its own under --rendezvous (a redis
// run name, or a file: subdirectory, created here).
std::string run_rendezvous(const Opts& o, const std::string& name) {
  if (parse_rendezvous(o.rendezvous).kind == RendezvousSpec::Kind::File) {
    const std::string spec = o.rendezvous + "/" + name;
    fs::create_directories(spec.substr(5));
    return spec;
  }
  return o.rendezvous + "-" + name;
}

// serial-each on several machines: the drivers meet (a rendezvous of one rank each) before
// their runs start, so that every machine's serial run overlaps the others'. Returns the
// moment they met (seconds since the epoch).
double all_machines_meet(const Opts& o, const std::string& name) {
  auto store = RendezvousStore::join(run_rendezvous(o, name + "-meet"), o.nnodes, {o.node_rank}, kDefaultCommTimeout);
  store->mark_formed();
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool interrupted(int rc) { return rc == 128 + SIGINT || rc == 128 + SIGTERM || rc == 128 + SIGHUP; }

// A stop signal that reached the driver between runs (the launcher relays those that come
// while a run's ranks are up, and its run then exits with 128 + the signal).
volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// Launches the plan's local ranks and reads their results into the run's JSON (nothing that
// compares it with other runs) and rank 0's final latents. rc: the workers' exit code (the
// JSON then says only what failed).
json measure(const Opts& o, const char* argv0, const RunPlan& p, std::vector<float>& latents, int& rc) {
  const Layout lay = parse_layout(p.layout);
  const int world = lay.deg.world();
  // Several machines: a layout's ranks are shared out evenly, ranks K*nproc.. on machine K; a
  // one-rank layout (the single-machine baseline) runs on machine 0 alone.
  const int nproc = world == 1 ? 1 : world / o.nnodes;
  const int first_rank = world == 1 ? 0 : o.node_rank * nproc;
  const std::string name = p.layout + "-" + p.dtype + "-" + std::to_string(p.size) + "-r" + std::to_string(p.round);
  const std::string rendezvous = o.nnodes > 1 && world > 1 ? run_rendezvous(o, name) : "";
  const fs::path rdir = p.tmp / name;
  fs::create_directories(rdir);
  std::vector<std::string> args = {argv0,          "--worker",  "--model",     p.model,
                                   "--layout",     p.layout,    "--dtype",     p.dtype,
                                   "--size",       std::to_string(p.size),     "--steps",
                                   std::to_string(o.steps),     "--warmup",    std::to_string(o.warmup),
                                   "--threads",    std::to_string(o.threads),  "--guidance",
                                   std::to_string(o.guidance),  "--gemm",      o.gemm,
                                   "--gemm-runs",  std::to_string(o.gemm_runs), "--result-dir",
                                   rdir.string(),  "--qkv",     o.qkv,
                                   "--sp-min-tokens", std::to_string(o.sp_min_tokens),
                                   "--ulysses-chunks", std::to_string(o.ulysses_chunks),
                                   "--transport",  o.transport, "--share-rows", o.share_rows};
  if (o.no_pin) args.push_back("--no-pin");
  if (o.load_only) args.push_back("--load-only");
  if (!o.weight_cache.empty()) args.insert(args.end(), {"--weight-cache", o.weight_cache});
  std::vector<char*> av;
  for (auto& a : args) av.push_back(a.data());
  av.push_back(nullptr);
  LaunchOptions lo;
  lo.world_size = world;
  lo.threads = lay.all_cores ? int(startup_cpus().size()) : o.threads;
  lo.announce = false;
  lo.program = "dit-bench";
  std::fprintf(stderr, "dit-bench: %s, %s, size %s, %d rank(s)%s...\n", p.layout.c_str(), p.dtype.c_str(),
               p.size > 0 ? std::to_string(p.size).c_str() : "default", world,
               o.rounds > 1 ? (", round " + std::to_string(p.round + 1) + " of " + std::to_string(o.rounds)).c_str() : "");
  const double met = lay.every_node && o.nnodes > 1 ? all_machines_meet(o, name) : 0;
  rc = launch_local_workers(int(args.size()), av.data(), nproc, first_rank, world, rendezvous, lo);
  json run;
  run["layout"] = p.layout;
  if (met > 0) run["machines_met_unix_s"] = met;
  run["ranks"] = world;
  run["dtype"] = p.dtype;
  run["round"] = p.round;
  if (rc != 0) {
    run["error"] = "workers exited with code " + std::to_string(rc);
    fs::remove_all(rdir);
    return run;
  }
  std::vector<json> ranks;
  for (int r = first_rank; r < first_rank + nproc; ++r) ranks.push_back(read_json((rdir / ("rank" + std::to_string(r) + ".json")).string()));
  const json& r0 = ranks[0];
  if (o.load_only) {  // memory after loading
    run["size"] = p.size;  // as asked (0: the model's default); loading does not depend on it
    run["load_s_rank0"] = r0["load_s"];
    add_memory_summary(run, ranks);
    fs::remove_all(rdir);
    return run;
  }
  add_step_figures(run, lay, r0, ranks, o.nnodes > 1 ? nproc : 0);
  latents = read_latents((rdir / "latents.f32").string());
  fs::remove_all(rdir);
  return run;
}

// What a driver's runs gave: each run's JSON, the exit code (a failed run's, or 128 + the signal
// that stopped them) and, where a signal stopped them, the run it stopped or came before.
struct Runs {
  json list = json::array();
  int rc = 0;
  std::string stopped;

  Runs stop(const std::string& which, int code) {
    stopped = which;
    rc = code;
    return *this;
  }
};

// Every size, dtype, round and layout in turn, each run against its round's baselines. Ctrl-C,
// kill or a time limit (`timeout`) stops them: the runs before are kept.
Runs run_layouts(const Opts& o, const char* argv0, const std::string& model, const std::vector<int>& sizes,
                 const fs::path& tmp) {
  const std::vector<std::string> layouts = split_list(o.layouts), dtypes = split_list(o.dtypes);
  Runs out;
  std::map<std::string, std::vector<float>> latents_of;  // "layout size round" -> f32 run's final latents
  catch_stop_signals();
  for (int size : sizes)
    for (const std::string& dtype : dtypes)
      for (int round = 0; round < o.rounds; ++round) {  // rounds alternate the layouts in time
        std::vector<float> serial_latents;
        double serial_step = 0, serial_pss = 0, all_step = 0, each_step = 0;
        for (const std::string& lname : layouts) {
          const Layout lay = parse_layout(lname);
          if (lay.deg.world() == 1 && !lay.every_node && o.node_rank != 0) continue;  // serial: machine 0 alone
          const std::string which = lname + ", " + dtype + ", size " + (size > 0 ? std::to_string(size) : "default") +
                                    ", round " + std::to_string(round + 1) + " of " + std::to_string(o.rounds);
          if (g_stop_signal != 0) return out.stop(which, 128 + int(g_stop_signal));  // came between runs
          std::vector<float> lat;
          int rc = 0;
          json run = measure(o, argv0, {model, lname, dtype, size, round, tmp}, lat, rc);
          if (interrupted(rc)) return out.stop(which, rc);  // came while its ranks ran
          if (rc != 0) {
            out.rc = rc;
          } else if (o.load_only) {  // PSS against the first serial run of this dtype and round
            if (lname == "serial" && serial_pss == 0) serial_pss = run["pss_mb_sum"].get<double>();
            else if (serial_pss > 0) run["pss_sum_vs_serial"] = run["pss_mb_sum"].get<double>() / serial_pss;
          } else {
            // A baseline's first run this round sets `step` (true); the runs after it get `field`.
            const double step_s = run["step_s"].get<double>();
            auto against = [&](const char* baseline, double& step, const char* field) {
              if (lname == baseline && step == 0) {
                step = step_s;
                return true;
              }
              if (step > 0) run[field] = step / step_s;
              return false;
            };
            if (against("serial", serial_step, "speedup_vs_serial")) serial_latents = lat;
            else if (serial_step > 0) run["latents_rel_diff_vs_serial"] = rel_diff(lat, serial_latents);
            // One process with all cores: the same total threads as a layout of one-thread ranks
            // on every core (the issue-14 comparison).
            against("serial-all", all_step, "speedup_vs_serial_all");
            // One machine's step while every machine runs its own (serial-each).
            against("serial-each", each_step, "speedup_vs_serial_each");
            // bf16 vs the f32 run of the same layout, size and round, when both were asked for.
            const std::string key = lname + " " + std::to_string(size) + " " + std::to_string(round);
            if (dtype == "f32") latents_of[key] = lat;
            else if (latents_of.count(key)) run["latents_rel_diff_vs_f32"] = rel_diff(lat, latents_of[key]);
          }
          out.list.push_back(run);
        }
      }
  return out;
}

int run_driver(const Opts& o, const char* argv0) {
  const std::string model = ensure_model(o);
  const Config tcfg = Config::load(model + "/transformer/config.json");
  std::vector<int> sizes;
  for (auto& s : split_list(o.sizes)) sizes.push_back(std::stoi(s));
  if (sizes.empty()) sizes.push_back(0);  // the model's default
  for (auto& l : split_list(o.layouts)) {  // fail early
    const int w = parse_layout(l).deg.world();
    DIT_CHECK(w == 1 || w % o.nnodes == 0, "layout '" << l << "' has " << w << " ranks, which --nnodes " << o.nnodes
                                                      << " machines cannot share evenly");
  }

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
  doc["cpus"] = startup_cpus().size();
  doc["pinning"] = o.no_pin ? "none (--no-pin)"
                            : "local rank r on allowed cores r*threads .. r*threads+threads-1 in placement order "
                              "(one CPU per physical core while they suffice)";
  if (o.nnodes > 1) {
    doc["nnodes"] = o.nnodes;
    doc["node_rank"] = o.node_rank;
    doc["rendezvous"] = o.rendezvous;
  }
  if (o.load_only) doc["load_only"] = true;
  doc["weight_cache"] = o.weight_cache.empty() ? "default" : o.weight_cache;
  doc["steps"] = o.steps;
  doc["warmup"] = o.warmup;
  doc["threads_per_rank"] = o.threads;
  doc["guidance_scale"] = o.guidance;
  doc["gemm_mkn"] = o.gemm;
  doc["qkv"] = o.qkv;
  Runs done = run_layouts(o, argv0, model, sizes, tmp);
  json& runs = done.list;
  if (!done.stopped.empty()) {
    doc["interrupted_at"] = done.stopped;
    std::fprintf(stderr, "dit-bench: interrupted at %s; the %zu run(s) before it are reported\n",
                 done.stopped.c_str(), runs.size());
  }
  // Pair bf16 runs with the f32 run of the same layout, size and round (timed runs only: a
  // const json's operator[] on a missing key is undefined behaviour, so every key read is there).
  for (json& r : runs) {
    if (r["dtype"] != "bf16" || !r.contains("step_s")) continue;
    for (const json& f : runs)
      if (f["dtype"] == "f32" && f.contains("step_s") && f["layout"] == r["layout"] && f["size"] == r["size"] &&
          f["round"] == r["round"])
        r["speedup_vs_f32"] = f["step_s"].get<double>() / r["step_s"].get<double>();
  }
  doc["summary"] = summarize(runs);
  doc["runs"] = runs;
  fs::remove_all(tmp);
  const std::string text = doc.dump(1);
  if (!o.output.empty()) {
    std::ofstream f(o.output);
    f << text << "\n";
  }
  std::printf("%s\n", text.c_str());
  return done.rc;
}

}  // namespace

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
                 "comma-separated: serial (1 rank, pinned), serial-all (1 rank, all cores), serial-each (with --nnodes: "
                 "serial on every machine at once, the machines meeting first; speedup_vs_serial_each for the layouts "
                 "after it), or degrees like cfg2, u2, r2, tp2, u2r2, cfg2u2, cfg2tp2")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "timed denoising steps (median reported)")->capture_default_str();
  app.add_option("--rounds", o.rounds,
                 "run every layout this many times, alternating them (serial, cfg2, serial, cfg2, ...); \"summary\" "
                 "has per layout the median step and the median of each round's speedup over that round's serial run")
      ->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed steps first")->capture_default_str();
  app.add_option("-t,--threads", o.threads,
                 "threads per rank; local rank r runs on allowed cores r*threads .. r*threads+threads-1, one CPU per "
                 "physical core while they suffice (wrapping, "
                 "and \"oversubscribed\" in the JSON, when ranks x threads > cores; serial-all always runs all cores)")
      ->capture_default_str();
  app.add_flag("--no-pin", o.no_pin, "leave the ranks' CPU affinity alone (compare with the default placement)");
  const char* mn = "Several machines (tools/netbench.sh): run the same command on each";
  app.add_option("--rendezvous", o.rendezvous, "redis://HOST:PORT/RUN (or file:DIR) all machines reach")->group(mn);
  app.add_option("--nnodes", o.nnodes,
                 "machines; each layout's ranks are shared out evenly (serial: machine 0 alone; serial-each: every "
                 "machine at once)")
      ->capture_default_str()
      ->group(mn);
  app.add_option("--node-rank", o.node_rank, "index of this machine (0 reports the step times)")
      ->capture_default_str()
      ->group(mn);
  app.add_option("--guidance", o.guidance, "guidance scale (> 1: CFG, batch 2)")->capture_default_str();
  app.add_option("--gemm", o.gemm, "M,K,N of the reference oneDNN GEMM")->capture_default_str();
  app.add_option("--gemm-runs", o.gemm_runs, "timed runs of the reference GEMM")->capture_default_str();
  app.add_option("-o,--output", o.output, "also write the JSON to this file");
  app.add_option("--qkv", o.qkv,
                 "fused: Q, K, V as one matmul (its weight the three stacked in one packed entry of the weight cache, "
                 "or without the cache a private concatenation per rank); split: three matmuls over the shared "
                 "memory-mapped weights; auto: fused, but split when the weights are read in place without the cache")
      ->check(CLI::IsMember({"auto", "fused", "split"}))
      ->capture_default_str();
  app.add_option("--sp-min-tokens", o.sp_min_tokens,
                 "tensor parallel: Megatron sequence parallelism from this many tokens x batch (default: dit-gen's)");
  app.add_option("--ulysses-chunks", o.ulysses_chunks,
                 "Ulysses: heads pipelined in up to this many chunks (1: no overlap; default: dit-gen's: " +
                     std::to_string(kDefaultUlyssesChunks) + " across machines, 1 on one)");
  app.add_option("--transport", o.transport, kTransportHelp)
      ->check(CLI::IsMember({"auto", "tcp"}))
      ->capture_default_str();
  app.add_option("--share-rows,--share-ffn", o.share_rows,
                 "as dit-gen's --share-rows: the feed-forward's (and with sequence parallelism the Q, K, V projection's) rows shared among local ranks")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--weight-cache", o.weight_cache,
                 "converted and packed weights as dit-gen's --weight-cache: DIR, or off (default: dit-gen's default "
                 "directory)");
  app.add_flag("--load-only", o.load_only,
               "measure memory after loading only (every rank's RSS and PSS, their sum against serial): no GEMM, no "
               "steps, so --dtype bf16 is accepted on CPUs that cannot compute it");
  app.add_flag("--worker", o.worker)->group("");
  app.add_option("--layout", o.layout)->group("");
  app.add_option("--result-dir", o.result_dir)->group("");
  if (auto rc = dit::parse_args(app, argc, argv, "dit-bench")) return *rc;
  try {
    DIT_CHECK(o.steps >= 1 && o.warmup >= 0 && o.threads >= 1, "--steps >= 1, --warmup >= 0, --threads >= 1");
    DIT_CHECK(o.nnodes >= 1 && o.node_rank >= 0 && o.node_rank < o.nnodes,
              "--node-rank " << o.node_rank << " is not in 0.." << o.nnodes - 1 << " (--nnodes " << o.nnodes << ")");
    DIT_CHECK(o.nnodes == 1 || !o.rendezvous.empty(), "--nnodes " << o.nnodes << " needs --rendezvous redis://HOST:PORT/RUN");
    if (!o.rendezvous.empty()) parse_rendezvous(o.rendezvous);
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
