#include "tools/cli/session.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "parallel/distributed_context.h"
#include "parallel/placement.h"
#include "parallel/shm_mapping.h"
#include "runtime/attention.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "tools/cli/demo_model.h"
#include "runtime/weight_cache.h"

namespace dit::cli {

LaunchOptions launch_options(const GenOptions& o, int world_size) {
  LaunchOptions lo;
  lo.world_size = world_size;
  lo.threads = o.threads;
  lo.nnodes = o.nnodes;
  lo.node_rank = o.node_rank;
  lo.nproc_per_node = o.nproc_per_node;
  lo.rendezvous = o.rendezvous;
  // validate() refuses a --timeout outside (0, 86400] later; until then a NaN or huge value
  // must not be converted to an integer (undefined behaviour, found by the hostile suite under UBSan).
  const bool timeout_ok = o.timeout > 0 && o.timeout <= 86400;  // false for NaN
  lo.timeout = std::chrono::milliseconds(timeout_ok ? int64_t(o.timeout * 1000) : 0);
  return lo;
}

void open_session(const GenOptions& o, const MeshDegrees& degrees, Session& s) {
  // Threads per rank: our launcher passes DIT_THREADS; ranks started by mpirun/srun/a script
  // share this machine's cores with the other local ranks unless -t says otherwise.
  if (s.env.threads > 0)
    set_num_threads(s.env.threads);
  else if (o.threads > 0 || s.env.external)
    set_num_threads(threads_per_rank(o.threads, s.env.local_world));
  // Local ranks on disjoint cores (parallel/placement.h), before any OpenMP thread exists.
  const Placement place = place_rank(s.env, num_threads(), !o.no_pin);
  // Our launcher said it already; ranks started by mpirun/srun/a script say it here, once a machine.
  if (s.env.external && !s.env.supervised && s.env.local_known && s.env.local_rank == 0) {
    std::fputs(oversubscription_warning("dit-gen", s.env.local_world, num_threads(), o.threads > 0).c_str(), stderr);
    std::fputs(openmp_binding_warning("dit-gen", s.env, num_threads()).c_str(), stderr);
  }
  if (o.verbose && s.env.world > 1)
    std::fprintf(stderr, "dit-gen: rank %d (local %d of %d): %d thread%s on core%s %s%s\n", s.env.rank,
                 s.env.local_rank, s.env.local_world, num_threads(), num_threads() == 1 ? "" : "s",
                 place.cpus.size() == 1 ? "" : "s", cpu_list_string(place.cpus).c_str(),
                 place.pinned ? (place.oversubscribed ? " (pinned; more threads than cores: sets overlap)" : " (pinned)")
                              : (" (not pinned: " + place.note + ")").c_str());

  PipelineOptions po;
  po.model_dir = model_dir_of(o.model);
  po.dtype = parse_dtype(o.dtype);
  if (!o.vae_dtype.empty()) po.vae_dtype = parse_dtype(o.vae_dtype);
  po.release_text_encoder = o.batch.empty();
  po.weight_cache = weight_cache_option(o.weight_cache);
  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const auto t_connect = Clock::now();
  if (degrees.world() > 1) {
    CommOptions co;
    co.timeout = std::chrono::milliseconds(int64_t(o.timeout * 1000));
    co.shared_memory = o.transport == "auto";
    s.world = connect_world(s.env, co);
    s.mesh = std::make_shared<DeviceMesh>(s.world, degrees);
    DistributedOptions dopt;
    if (o.sp_min_tokens > 0) dopt.sp_min_tokens = o.sp_min_tokens;
    dopt.ulysses_chunks = ulysses_chunks_for(s.env, o.ulysses_chunks);
    dopt.vae_parallel = parse_vae_parallel(o.vae_parallel);
    dopt.share_rows = parse_share_rows(o.share_rows);
    po.parallel = make_distributed_context(s.mesh, dopt);
  }
  s.connect_seconds = seconds_since(t_connect);
  const auto t_load = Clock::now();
  // Every rank reads the same files: a broken checkpoint is refused alike everywhere.
  s.pipe = same_on_every_rank([&] { return Pipeline::load(po); });
  s.load_seconds = seconds_since(t_load);
  const ModelInfo& info = s.pipe->info();
  if (o.verbose) {
    if (s.env.rank == 0)
      std::fprintf(stderr,
                   "dit-gen: model %s: %s, %d layers, hidden %d, %d heads, VAE scale %d, %d thread%s/rank, "
                   "compute %s%s, VAE %s%s\n",
                   info.dir.c_str(), info.family.c_str(), info.layers, info.hidden, info.heads, info.vae_scale,
                   num_threads(), num_threads() == 1 ? "" : "s", dtype_name(po.dtype),
                   po.dtype == DType::BF16 && qk_pad_by_default()
                       ? " (attention's Q·Kᵀ over head_dim zero-padded to a multiple of 32)"
                       : "",
                   dtype_name(s.pipe->vae_dtype()),
                   !s.pipe->vae_winograd()                ? ""
                   : s.pipe->vae_dtype() == DType::BF16   ? " (3x3 convolutions by Winograd F(2x2, 3x3))"
                                                          : " (3x3 convolutions by Winograd F(4x4, 3x3))");
    std::fprintf(stderr, "dit-gen: rank %d: %.0f MB resident after loading\n", s.env.rank, resident_mb());
  }
}

void print_shm_pages() {
  const ShmPages p = shm_pages();
  if (p.huge_bytes + p.small_bytes == 0) return;
  std::fprintf(stderr, "dit-gen: shared memory: %.0f MB on 2 MB pages", double(p.huge_bytes) / 1e6);
  if (p.small_bytes) std::fprintf(stderr, ", %.0f MB on 4 KB pages (%s)", double(p.small_bytes) / 1e6, p.why_small.c_str());
  std::fprintf(stderr, "\n");
}

double resident_mb() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

// Which of rank 0's groups exchange data through shared memory, and why the others do not:
// "shared memory (ulysses, cfg)", or "TCP (ring: rank 1 of group ... is on another machine ...)".
std::string transport_summary(DeviceMesh& mesh) {
  std::string shm, tcp;
  for (const GroupDef& def : mesh_groups()) {
    ProcessGroup& g = mesh.group(def.group);
    if (g.size() < 2) continue;
    std::string& list = g.uses_shared_memory() ? shm : tcp;
    list += (list.empty() ? "" : ", ") + std::string(def.name);
    if (!g.uses_shared_memory() && !g.shared_memory_note().empty()) list += ": " + g.shared_memory_note();
  }
  std::string out;
  if (!shm.empty()) out = "shared memory (" + shm + ")";
  if (!tcp.empty()) out += (out.empty() ? "" : ", ") + std::string("TCP (") + tcp + ")";
  return out;
}

void print_layout(Session& s, const MeshDegrees& degrees, int64_t tokens) {
  if (!s.world) return;
  const int bands = s.pipe->parallel().decode_parts();
  if (s.env.rank == 0) {
    std::fprintf(stderr, "dit-gen: %d ranks, mesh %s, %d thread%s per rank%s\n", degrees.world(),
                 mesh_str(degrees).c_str(), num_threads(), num_threads() == 1 ? "" : "s",
                 bands > 1 ? (", VAE decoded in " + std::to_string(bands) + " bands of rows").c_str() : "");
    std::fprintf(stderr, "dit-gen: rank 0 exchanges data by %s\n", transport_summary(*s.mesh).c_str());
  }
  std::fflush(stderr);
  s.world->barrier();
  const ModelInfo& info = s.pipe->info();
  LayoutInfo li;
  li.tokens = tokens;
  li.heads = info.heads;
  li.ffn = 4 * int64_t(info.hidden);
  li.vocab = info.text_vocab;
  if (!info.cond_first) std::swap(li.halves[0], li.halves[1]);  // the family's guidance batch order
  for (int r = 0; r < degrees.world(); ++r) {
    if (r == s.env.rank) {
      std::fprintf(stderr, "dit-gen:   %s\n", s.pipe->parallel().describe(li).c_str());
      std::fflush(stderr);
    }
    s.world->barrier();
  }
}

}  // namespace dit::cli
