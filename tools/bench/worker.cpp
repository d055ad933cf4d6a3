// dit-bench's worker: one rank of a measured run (tools/bench/bench.h).
#include <malloc.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/dit_gen.h"
#include "parallel/distributed_context.h"
#include "parallel/launcher.h"
#include "parallel/mesh.h"
#include "parallel/placement.h"
#include "parallel/shm_mapping.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/gemm_probe.h"
#include "runtime/profile.h"
#include "runtime/tensor.h"
#include "runtime/weight_cache.h"
#include "tools/bench/bench.h"

namespace dit::bench {

using json = nlohmann::ordered_json;

namespace {

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

void add_memory(json& r) {
  r["peak_rss_mb"] = maxrss_mb();
  r["pss_mb"] = pss_mb();
  r["rss_mb"] = rss_mb();
}

void write_result(const Opts& o, int rank, const json& r) {
  if (o.result_dir.empty()) {
    std::printf("%s\n", r.dump(1).c_str());
    return;
  }
  std::ofstream out(o.result_dir + "/rank" + std::to_string(rank) + ".json");
  out << r.dump() << "\n";
  DIT_CHECK(out.good(), "cannot write the result to " << o.result_dir);
}

// Local rank r on its own `threads` cores (parallel/placement.h), before any thread starts;
// sets the thread count.
Placement place_rank(const Opts& o, const Layout& lay, const LaunchEnv& env) {
  const std::vector<int> cpus = allowed_cpus();
  int threads = env.threads > 0 ? env.threads : o.threads;
  Placement place;
  place.cpus = cpus;
  if (lay.all_cores) {
    // One process with every allowed core: the same total threads as the layouts of the
    // invocation (ranks x -t). -t does not apply: serial-all with -t 8 on 16 cores ran 8
    // threads against layouts of 2 x 8 and halved the baseline.
    threads = int(cpus.size());
  } else if (!o.no_pin) {
    const size_t need = size_t(env.local_world) * size_t(threads);
    place = rank_cores(placement_order(physical_cores(cpus), need), env.local_rank, env.local_world, threads);
    pin_to_cpus(place.cpus);
  }
  set_num_threads(threads);
  return place;
}

// The pipeline's options; with several ranks the world is connected (into `world`, which the
// caller aborts on an error) and its mesh's parallel context set.
PipelineOptions pipeline_options(const Opts& o, const Layout& lay, const LaunchEnv& env,
                                 std::shared_ptr<ProcessGroup>& world, std::shared_ptr<DeviceMesh>& mesh) {
  PipelineOptions po;
  po.model_dir = o.model;
  po.dtype = parse_dtype(o.dtype);
  // --load-only on a CPU without bf16 compute: the VAE decoder (built at load, unlike the
  // transformer's kernels) in f32, so that the weights load as they would (it is not measured).
  if (o.load_only && !compute_supported(po.dtype)) po.vae_dtype = DType::F32;
  po.qkv = o.qkv == "fused" ? QkvProjection::Fused : o.qkv == "split" ? QkvProjection::Split : QkvProjection::Auto;
  po.weight_cache = weight_cache_option(o.weight_cache);
  if (lay.deg.world() > 1) {
    CommOptions co;
    co.shared_memory = o.transport == "auto";
    world = connect_world(env, co);
    mesh = std::make_shared<DeviceMesh>(world, lay.deg);
    DistributedOptions dopt;
    if (o.sp_min_tokens > 0) dopt.sp_min_tokens = o.sp_min_tokens;
    dopt.ulysses_chunks = ulysses_chunks_for(env, o.ulysses_chunks);
    dopt.share_rows = parse_share_rows(o.share_rows);
    po.parallel = make_distributed_context(mesh, dopt);
  }
  return po;
}

// GEMM throughput on this rank's threads, all ranks at once (as they run the model), timed
// before and after the denoising loop (medians over both), so that a change of machine load
// during the run shows in the reference too.
struct GemmRates {
  std::vector<int64_t> mkn;
  std::vector<double> f32, bf16;

  explicit GemmRates(const Opts& o) {
    for (auto& x : split_list(o.gemm)) mkn.push_back(std::stoll(x));
    DIT_CHECK(mkn.size() == 3, "--gemm needs M,K,N");
  }
  void time(int runs, ProcessGroup* world) {
    if (world) world->barrier();
    for (double g : GemmProbe(mkn[0], mkn[1], mkn[2], DType::F32).run(runs)) f32.push_back(g);
    if (compute_supported(DType::BF16))  // oneDNN 2.6: AVX-512 only (bf16 runs were refused up front)
      for (double g : GemmProbe(mkn[0], mkn[1], mkn[2], DType::BF16).run(runs)) bf16.push_back(g);
    if (world) world->barrier();
    // The probes' freed memory (oneDNN's scratchpads come from malloc) back to the system, so
    // that it does not count in this rank's PSS: dit-gen runs no probe. 2.2 MB a rank on the
    // VM (bf16, 8 ranks: summed PSS 431 -> 413 MB at 4 layers).
    malloc_trim(0);
  }
};

// The denoising loop: warm-up steps, then timed ones with the profiler's totals of those.
struct TimedSteps {
  Result res;
  int size = 0;  // pixels
  std::vector<double> step_s;
  profile::Totals totals;
};

TimedSteps run_steps(const Opts& o, Pipeline& pipe) {
  TimedSteps t;
  Request req;
  req.prompt = pipe.info().text_to_image ? "a red fox in the snow" : "1";  // "1": a class id every DiT has
  req.seed = 42;
  req.steps = o.warmup + o.steps;
  req.guidance_scale = o.guidance;
  req.decode = false;
  t.size = o.size > 0 ? o.size : pipe.info().default_width;
  req.width = req.height = t.size;
  req.resolution_binning = !pipe.info().resolution_binning;  // the size asked for, not its aspect-ratio bin
  profile::enable(true);
  profile::reset();
  t.res = pipe.generate(req, [&](const StepInfo& si) {
    if (si.step <= o.warmup) {
      if (si.step == o.warmup) profile::reset();
      return;
    }
    t.step_s.push_back(si.step_seconds);
  });
  t.totals = profile::totals();
  profile::enable(false);
  return t;
}

// The profiler's categories per timed step (other: the sampler, unpatchify, guidance, the
// loop), the attention kernels' phases, bytes sent and rows computed for other ranks.
void add_breakdown(json& r, const TimedSteps& t) {
  const profile::Totals& tot = t.totals;
  const double n = double(std::max<size_t>(1, t.step_s.size()));
  json br;
  double claimed = 0;
  for (int c = 0; c < profile::kCats; ++c) {
    br[profile::cat_name(profile::Cat(c))] = tot.seconds[c] / n;
    claimed += tot.seconds[c] / n;
  }
  br["other"] = std::max(0.0, median(t.step_s) - claimed);
  r["breakdown_s"] = br;
  json ph;  // the attention kernels' phases, thread-seconds per step (runtime/profile.h)
  for (int i = 0; i < profile::kAttentionPhases; ++i) ph[profile::kAttentionPhaseNames[i]] = tot.attention_phases[i] / n;
  r["attention_phases_thread_s"] = ph;
  r["bytes_sent_per_step"] = double(tot.bytes_sent) / n;
  r["rows_for_others_per_step"] = double(tot.rows_for_others) / n;  // parallel/shared_rows.h
}

// The model, its tokens and FLOPs at this run's batch, and a checksum of the final latents
// (to compare dtypes and layouts).
void add_model(json& r, const Pipeline& pipe, const TimedSteps& t) {
  const ModelInfo& info = pipe.info();
  const int64_t m = info.size_multiple;
  r["tokens"] = int64_t(t.res.request.gen_height / m) * (t.res.request.gen_width / m);
  r["size"] = t.size;
  const ModelFlops f = pipe.flops();
  r["flops"] = {{"linear", f.linear},
                {"attention", f.attention},
                {"cross_attention", f.cross_attention},
                {"conditioning", f.conditioning},
                {"per_request", f.per_request}};
  r["model"] = {{"family", info.family}, {"layers", info.layers}, {"hidden", info.hidden}, {"heads", info.heads}};
  double sum = 0, sq = 0;
  const float* x = t.res.latents.f32();
  for (int64_t i = 0; i < t.res.latents.numel(); ++i) {
    sum += x[i];
    sq += double(x[i]) * x[i];
  }
  r["latents_sum"] = sum;
  r["latents_l2"] = std::sqrt(sq);
}

// --load-only: memory once every rank has loaded (the weights: mapped, converted or cached).
json load_result(const LaunchEnv& env, const Placement& place, double load_s, ProcessGroup* world) {
  json r;
  r["rank"] = env.rank;
  r["cpus"] = place.cpus;
  r["pinned"] = place.pinned;
  r["load_s"] = load_s;
  if (world) world->barrier();
  add_memory(r);
  return r;
}

// A timed run's result of this rank.
json step_result(const Opts& o, const LaunchEnv& env, const Placement& place, const ProcessGroup* world,
                 const Pipeline& pipe, const TimedSteps& t, const GemmRates& gemm) {
  json r;
  r["rank"] = env.rank;
  r["local_rank"] = env.local_rank;
  r["threads"] = num_threads();
  r["ulysses_chunks"] = ulysses_chunks_for(env, o.ulysses_chunks);
  r["share_rows"] = o.share_rows;
  r["shared_memory"] = world && world->uses_shared_memory();
  const ShmPages pages = shm_pages();  // parallel/shm_mapping.h
  r["shm_mb_2mb_pages"] = double(pages.huge_bytes) / 1e6;
  r["shm_mb_4kb_pages"] = double(pages.small_bytes) / 1e6;
  if (pages.small_bytes) r["shm_4kb_pages_why"] = pages.why_small;
  r["cpus"] = place.cpus;
  r["pinned"] = place.pinned;
  r["oversubscribed"] = place.oversubscribed;
  r["step_seconds"] = t.step_s;
  r["step_median_s"] = median(t.step_s);
  r["gemm_f32_gflops"] = median(gemm.f32);
  r["gemm_bf16_gflops"] = gemm.bf16.empty() ? json() : json(median(gemm.bf16));  // null: no bf16 on this CPU
  add_breakdown(r, t);
  add_memory(r);
  add_model(r, pipe, t);
  return r;
}

}  // namespace

int run_worker(const Opts& o) {
  const Layout lay = parse_layout(o.layout);
  LaunchOptions lo;
  lo.world_size = lay.deg.world();
  lo.threads = o.threads;
  LaunchEnv env = detect_launch_env(lo);
  std::shared_ptr<ProcessGroup> world;
  try {
    const Placement place = place_rank(o, lay, env);
    std::shared_ptr<DeviceMesh> mesh;
    const PipelineOptions po = pipeline_options(o, lay, env, world, mesh);
    const auto t_load = std::chrono::steady_clock::now();
    auto pipe = Pipeline::load(po);
    json r;
    if (o.load_only) {
      r = load_result(env, place, std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count(),
                      world.get());
    } else {
      GemmRates gemm(o);
      gemm.time(o.gemm_runs, world.get());
      const TimedSteps t = run_steps(o, *pipe);
      gemm.time(o.gemm_runs, world.get());
      r = step_result(o, env, place, world.get(), *pipe, t, gemm);
      if (env.rank == 0 && !o.result_dir.empty()) {  // the final latents, for the driver's dtype comparison
        std::ofstream lf(o.result_dir + "/latents.f32", std::ios::binary);
        lf.write(static_cast<const char*>(t.res.latents.data()), std::streamsize(t.res.latents.nbytes()));
      }
    }
    if (world) world->barrier();  // every rank has measured its memory before any exits
    write_result(o, env.rank, r);
    mesh.reset();
    if (world) world->shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dit-bench: error: %s\n", e.what());
    fail_rank(world.get(), env, e.what());
    return 1;
  }
}

}  // namespace dit::bench
