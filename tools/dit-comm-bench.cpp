// dit-comm-bench: bandwidth and latency of the collectives dit-gen's parallel attention uses
// (all-to-all for Ulysses, all-gather for CFG / output gathering, send/recv for Ring), over
// Gloo TCP between local processes. Starts its own ranks with dit's launcher.
//
//   dit-comm-bench --nproc 4                      # JSON on stdout
//   dit-comm-bench --nproc 2 --sizes 16K,1M,64M --iters 20 --ops all_to_all,pingpong
//
// Message size = bytes each rank sends in total for all-to-all (size/n to each peer), the
// gathered output for all-gather (size/n from each rank), one message for send/recv.
// Times are the per-iteration maximum over ranks; median and min over iterations.
// algbw = size / time; busbw = algbw * (n-1)/n for the collectives (the traffic each rank
// puts on the wire, as nccl-tests reports it); for send/recv "pingpong" (rank 0 <-> 1,
// latency = half the round trip) and "ring" (every rank sends to the next and receives
// from the previous at once, as ring attention does) bandwidth is per rank and direction.
//
// "ulysses" times one Ulysses self-attention forward over the ranks (DiT-XL/2's 16 heads of 72,
// batch 2; --tokens, --dtype), both ways in one run, their iterations alternated: through the
// shared-memory windows (the QKV rows written where qkv_destination() says, as the model's
// projection does; the all-to-all's into its own buffer; both before the barrier that starts
// the timing) and through the all-to-alls
// (windows off for that object, as DIT_NO_SHM_WINDOWS does). The attention's arithmetic is the
// same in both, so their difference is what the exchange costs. The object prepared first ran
// up to 10% slower at 4096 tokens on the 2-core VM whichever it was (where its buffers landed),
// so each dtype is measured twice, each way prepared first, and "windows_over_all_to_all" is
// the median of the 2·iters per-iteration ratios.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "parallel/launcher.h"
#include "parallel/parallel_attention.h"
#include "parallel/process_group.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/engine.h"
#include "runtime/token_split.h"
#include "tools/parse_args.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t c = s.find(',', start);
    if (c == std::string::npos) c = s.size();
    if (c > start) out.push_back(s.substr(start, c - start));
    start = c + 1;
  }
  return out;
}

constexpr size_t kMaxSize = size_t(1) << 30;  // a message of 1 GiB: far past where bandwidth levels off
constexpr int64_t kMaxTokens = 16384;         // ulysses: DiT/2 at 2048 px

// "16K", "4M", "1G", "512": bytes, 1 .. kMaxSize.
size_t parse_size(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit = end ? end : "";
  double mul = 0;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KB" || unit == "k") mul = 1024;
  else if (unit == "M" || unit == "MB") mul = 1024 * 1024;
  else if (unit == "G" || unit == "GB") mul = 1024.0 * 1024 * 1024;
  DIT_CHECK(end != s.c_str() && mul > 0 && std::isfinite(v) && v * mul >= 1 && v * mul <= double(kMaxSize),
            "--sizes: '" << s << "' is not a size from 1 B to 1G (e.g. 16K, 4M)");
  return size_t(v * mul);
}

// MemAvailable of /proc/meminfo in bytes, or 0 where it cannot be read.
size_t available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  while (f >> key) {
    if (key == "MemAvailable:" && (f >> kb)) return kb * 1024;
    f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

// The operations timed over each message size: what one iteration does on every rank, how
// many ranks it needs, and what its bandwidth counts (see the top of this file).
struct Buffers {
  std::vector<float> a, b, c;
};
struct SizedOp {
  const char* name;
  int min_ranks;
  bool per_direction;  // send/recv: bandwidth per rank and direction (else busbw = algbw·(n-1)/n)
  bool round_trip;     // an iteration is two messages: its time halved (one way)
  void (*run)(dit::ProcessGroup& pg, Buffers& m, size_t bytes, uint32_t& step);
};

const std::vector<SizedOp>& sized_ops() {
  static const std::vector<SizedOp> ops = {
      {"all_to_all", 1, false, false,
       [](dit::ProcessGroup& pg, Buffers& m, size_t bytes, uint32_t&) {
         pg.all_to_all(m.a.data(), m.b.data(), bytes / 4 / size_t(pg.size()));
       }},
      {"all_gather", 1, false, false,
       [](dit::ProcessGroup& pg, Buffers& m, size_t bytes, uint32_t&) {
         pg.all_gather(m.a.data(), m.b.data(), bytes / 4 / size_t(pg.size()));
       }},
      {"pingpong", 2, true, true,
       [](dit::ProcessGroup& pg, Buffers& m, size_t bytes, uint32_t&) {  // rank 0 <-> 1, the others idle
         if (pg.rank() == 0) {
           pg.send(m.a.data(), bytes, 1, 1);
           pg.recv(m.b.data(), bytes, 1, 2);
         } else if (pg.rank() == 1) {
           pg.recv(m.b.data(), bytes, 0, 1);
           pg.send(m.b.data(), bytes, 0, 2);
         }
       }},
      {"ring", 2, true, false,
       [](dit::ProcessGroup& pg, Buffers& m, size_t bytes, uint32_t& step) {  // to the next, from the previous
         const int n = pg.size(), r = pg.rank();
         auto s = pg.isend(m.a.data(), bytes, (r + 1) % n, step);
         auto q = pg.irecv(m.c.data(), bytes, (r + n - 1) % n, step);
         ++step;
         s.wait();
         q.wait();
       }},
  };
  return ops;
}

const SizedOp* find_sized_op(const std::string& name) {
  for (const SizedOp& op : sized_ops())
    if (name == op.name) return &op;
  return nullptr;
}

// What the flags ask for, checked before any rank starts: one line naming the flag, no output.
struct Flags {
  int nproc = 2, iters = 0, timeout_s = 300, warmup = 2;
  std::string sizes = "16K,64K,256K,1M,4M,16M,64M", ops = "all_to_all,all_gather,pingpong,ring", dtypes = "f32";
  int64_t tokens = 1024;
  std::string transport = "auto";
};
struct Plan {
  std::vector<size_t> sizes;
  std::vector<std::string> ops;
  std::vector<dit::DType> dtypes;  // ulysses
};

Plan check_flags(const Flags& f) {
  Plan p;
  p.ops = split(f.ops);
  DIT_CHECK(!p.ops.empty(), "--ops: expected one or more of all_to_all, all_gather, pingpong, ring, ulysses");
  bool sized = false;
  for (const std::string& op : p.ops) {
    const SizedOp* s = find_sized_op(op);
    DIT_CHECK(s || op == "ulysses",
              "--ops: unknown operation '" << op << "' (all_to_all, all_gather, pingpong, ring, ulysses)");
    DIT_CHECK(f.nproc >= (s ? s->min_ranks : 2), "--ops " << op << " needs --nproc 2 or more");
    sized = sized || s;
  }
  for (const std::string& s : split(f.sizes)) p.sizes.push_back(parse_size(s));
  DIT_CHECK(!sized || !p.sizes.empty(), "--sizes: expected one or more sizes (e.g. 16K,4M)");
  if (sized) {  // three buffers of the largest size on every rank
    const size_t need = 3 * *std::max_element(p.sizes.begin(), p.sizes.end()) * size_t(f.nproc);
    const size_t have = available_memory();
    DIT_CHECK(have == 0 || need <= have, "--sizes: the largest needs " << (need >> 20) << " MB over --nproc " << f.nproc
                                             << " ranks (3 buffers each); " << (have >> 20)
                                             << " MB are available");
  }
  if (std::find(p.ops.begin(), p.ops.end(), "ulysses") != p.ops.end()) {
    for (const std::string& d : split(f.dtypes)) p.dtypes.push_back(dit::parse_compute_type("--dtype", d));
    DIT_CHECK(!p.dtypes.empty(), "--dtype: expected f32, bf16 or both");
  }
  return p;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Bench {
  dit::ProcessGroup& pg;
  int warmup;

  // Runs op `iters` times; returns per-iteration max-over-ranks seconds.
  template <class F>
  std::vector<double> time(int iters, F&& op) {
    for (int i = 0; i < warmup; i++) op();
    std::vector<float> local(iters);
    for (int i = 0; i < iters; i++) {
      pg.barrier();
      auto t0 = Clock::now();
      op();
      local[i] = float(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::vector<float> all(size_t(iters) * pg.size());
    pg.all_gather(local.data(), all.data(), iters);
    std::vector<double> worst(iters, 0);
    for (int r = 0; r < pg.size(); r++)
      for (int i = 0; i < iters; i++) worst[i] = std::max(worst[i], double(all[size_t(r) * iters + i]));
    return worst;
  }
};

// One Ulysses forward per call, through windows (A) or all-to-alls (B), on the same input.
class UlyssesPair {
 public:
  UlyssesPair(std::shared_ptr<dit::ProcessGroup> g, int64_t tokens, dit::DType dtype, bool windows_first)
      : dtype_(dtype) {
    dit::SelfAttentionShape s;
    s.batch = 2;
    s.heads = 16;
    s.head_dim = 72;
    s.total_tokens = tokens;
    s.local_tokens = dit::split_tokens(tokens, g->size(), g->rank()).size();
    s.compute = dtype;
    auto make_windows = [&] {
      windows_ = dit::make_sequence_parallel_attention(g, nullptr, 1);
      windows_->prepare(s);
    };
    if (windows_first) make_windows();
    setenv("DIT_NO_SHM_WINDOWS", "1", 1);  // every rank: this object's exchange is the all-to-all
    all_to_all_ = dit::make_sequence_parallel_attention(g, nullptr, 1);
    all_to_all_->prepare(s);
    unsetenv("DIT_NO_SHM_WINDOWS");
    if (!windows_first) make_windows();
    has_windows_ = g->window_bytes() > 0;
    n_ = size_t(s.batch * s.local_tokens * 3 * s.heads * s.head_dim);
    in_.assign(n_ + 1, 0.0f);
    for (size_t i = 0; i < n_; ++i) in_[i] = float((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    own_.assign(n_ + 1, 0.0f);
    own16_.assign(n_ + 1, 0);
    in16_.resize(n_ + 1);
    for (size_t i = 0; i <= n_; ++i) in16_[i] = dit::f32_to_bf16(in_[i]);
    out_.assign(size_t(s.batch * s.local_tokens * s.heads * s.head_dim) + 1, 0.0f);
    out16_.assign(out_.size(), 0);
  }
  bool has_windows() const { return has_windows_; }
  // Writes the input where the next forward reads it, as the model's projection does: into the
  // window for the windows' object (qkv_destination()), into a buffer of its own for the
  // all-to-all's (so that both start with the same bytes just written).
  void stage(bool windows) {
    const bool bf16 = dtype_ == dit::DType::BF16;
    at_ = windows ? windows_->qkv_destination() : bf16 ? static_cast<void*>(own16_.data()) : own_.data();
    std::memcpy(at_, bf16 ? static_cast<const void*>(in16_.data()) : in_.data(), n_ * (bf16 ? 2 : 4));
  }
  // Seconds of one forward, after stage(windows).
  double forward(bool windows) {
    dit::SelfAttention& a = windows ? *windows_ : *all_to_all_;
    const auto t0 = Clock::now();
    if (dtype_ == dit::DType::BF16)
      a.forward(static_cast<const uint16_t*>(at_), out16_.data());
    else
      a.forward(static_cast<const float*>(at_), out_.data());
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
  double run(bool windows) {
    stage(windows);
    return forward(windows);
  }

 private:
  dit::DType dtype_;
  std::unique_ptr<dit::SelfAttention> windows_, all_to_all_;
  bool has_windows_ = false;
  void* at_ = nullptr;  // staged input in the window, or null
  size_t n_ = 0;
  std::vector<float> in_, own_, out_;  // own_: the all-to-all's input, written by stage()
  std::vector<uint16_t> in16_, own16_, out16_;
};

// One Ulysses forward each way for a dtype (the top of this file): the slowest rank's time per
// iteration, medians, and the median of the per-iteration ratios.
nlohmann::json time_ulysses(const std::shared_ptr<dit::ProcessGroup>& world, const Flags& f, dit::DType dtype) {
  dit::ProcessGroup& pg = *world;
  const int n = pg.size(), iters = f.iters > 0 ? f.iters : 20;
  std::vector<double> worst[2], ratios;  // [0] windows, [1] all-to-all: per iteration, the slowest rank
  for (bool windows_first : {true, false}) {
    UlyssesPair pair(world, f.tokens, dtype, windows_first);
    DIT_CHECK(pair.has_windows(), "--ops ulysses: the ranks have no shared-memory windows (" << pg.window_note() << ")");
    for (int i = 0; i < f.warmup; ++i) pair.run(true), pair.run(false);
    std::vector<float> local(size_t(2 * iters));
    for (int i = 0; i < iters; ++i)  // alternated: windows, all-to-all, all-to-all, windows, ...
      for (int k = 0; k < 2; ++k) {
        const bool windows = (i + k) % 2 == 0;
        pair.stage(windows);  // not timed: the projection writes the rows either way
        pg.barrier();
        local[size_t(2 * i + (windows ? 0 : 1))] = float(pair.forward(windows));
      }
    std::vector<float> all(local.size() * size_t(n));
    pg.all_gather(local.data(), all.data(), local.size());
    for (int i = 0; i < iters; ++i) {
      double w[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        for (int q = 0; q < n; ++q) w[k] = std::max(w[k], double(all[size_t(q) * local.size() + size_t(2 * i + k)]));
        worst[k].push_back(w[k]);
      }
      ratios.push_back(w[0] / w[1]);
    }
  }
  const double mw = median(worst[0]), ma = median(worst[1]), ratio = median(ratios);
  if (pg.rank() == 0)
    std::fprintf(stderr, "ulysses %-4s %6lld tokens  windows %9.1f us  all-to-all %9.1f us  ratio %.4f\n",
                 dit::dtype_name(dtype), static_cast<long long>(f.tokens), mw * 1e6, ma * 1e6, ratio);
  return {{"op", "ulysses"},
          {"dtype", dit::dtype_name(dtype)},
          {"tokens", f.tokens},
          {"iters", 2 * iters},
          {"windows_median_us", std::round(mw * 1e7) / 10},
          {"all_to_all_median_us", std::round(ma * 1e7) / 10},
          {"windows_over_all_to_all", std::round(ratio * 1e4) / 1e4}};
}

// One sized operation at one message size (rounded so that every rank's block is whole floats).
nlohmann::json time_sized(dit::ProcessGroup& pg, const Flags& f, const SizedOp& op, size_t size0, Buffers& m) {
  const int n = pg.size();
  const size_t size = std::max<size_t>(size_t(n) * 4, size0 / (size_t(n) * 4) * (size_t(n) * 4));
  const int iters = f.iters > 0 ? f.iters : int(std::clamp<size_t>((size_t(256) << 20) / size, 5, 50));
  uint32_t step = 0;
  Bench bench{pg, f.warmup};
  std::vector<double> t = bench.time(iters, [&] { op.run(pg, m, size, step); });
  if (op.round_trip)
    for (auto& x : t) x /= 2;  // one way
  const double med = median(t), mn = *std::min_element(t.begin(), t.end());
  const double algbw = double(size) / med / 1e9, bus_factor = op.per_direction ? 1.0 : double(n - 1) / n;
  if (pg.rank() == 0)
    std::fprintf(stderr, "%-10s %9zu B  median %10.1f us  %7.3f GB/s\n", op.name, size, med * 1e6, algbw);
  return {{"op", op.name},
          {"bytes", size},
          {"iters", iters},
          {"median_us", std::round(med * 1e7) / 10},
          {"min_us", std::round(mn * 1e7) / 10},
          {"algbw_GBps", std::round(algbw * 1000) / 1000},
          {"busbw_GBps", std::round(algbw * bus_factor * 1000) / 1000}};
}

// Every operation asked for, in order, on this rank; rank 0 prints the JSON document.
void run_rank(const std::shared_ptr<dit::ProcessGroup>& world, const Flags& f, const Plan& plan) {
  dit::ProcessGroup& pg = *world;
  const size_t floats = plan.sizes.empty() ? 0 : *std::max_element(plan.sizes.begin(), plan.sizes.end()) / 4 + 16;
  Buffers m{std::vector<float>(floats, float(pg.rank())), std::vector<float>(floats), std::vector<float>(floats)};
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& op : plan.ops) {
    if (op == "ulysses") {
      for (dit::DType t : plan.dtypes) results.push_back(time_ulysses(world, f, t));
      continue;
    }
    for (size_t size : plan.sizes) results.push_back(time_sized(pg, f, *find_sized_op(op), size, m));
  }
  if (pg.rank() == 0) {
    nlohmann::json out = {{"tool", "dit-comm-bench"},
                          {"transport", pg.uses_shared_memory()
                                            ? "shared memory (all_to_all, all_gather), gloo tcp (send/recv)"
                                            : "gloo tcp"},
                          {"shared_memory_note", pg.shared_memory_note()},
                          {"world", pg.size()},
                          {"threads_per_rank", 1},
                          {"results", results}};
    std::printf("%s\n", out.dump(1).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dit-comm-bench: bandwidth/latency of all-to-all, all-gather and send/recv between ranks (Gloo TCP, and shared memory on one machine)"};
  Flags f;
  app.add_option("--nproc", f.nproc, "local processes (ranks)")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--sizes", f.sizes, "message sizes, 1 B to 1G (e.g. 16K, 4M)")->capture_default_str();
  app.add_option("--ops", f.ops, "operations: all_to_all, all_gather, pingpong, ring, ulysses")->capture_default_str();
  app.add_option("--iters", f.iters, "iterations per size (0: 5..50 by size)")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  app.add_option("--warmup", f.warmup, "untimed iterations per size")->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--timeout", f.timeout_s, "communication timeout, seconds")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_option("--tokens", f.tokens, "ulysses: image tokens (DiT-XL/2: 1024 at 512 px, 4096 at 1024 px)")
      ->check(CLI::Range(int64_t(1), kMaxTokens))
      ->capture_default_str();
  app.add_option("--dtype", f.dtypes, "ulysses: compute types, comma-separated: f32, bf16")->capture_default_str();
  app.add_option("--transport", f.transport, dit::kTransportHelp)->check(CLI::IsMember({"auto", "tcp"}))->capture_default_str();
  if (auto rc = dit::parse_args(app, argc, argv, "dit-comm-bench")) return *rc;
  Plan plan;
  try {
    plan = check_flags(f);  // before any rank starts
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dit-comm-bench: error: %s\n", e.what());
    return 2;
  }

  std::shared_ptr<dit::ProcessGroup> world;
  dit::LaunchEnv env;
  try {
    dit::LaunchOptions lo;
    lo.world_size = f.nproc;
    lo.threads = 1;
    lo.program = "dit-comm-bench";
    if (auto rc = dit::maybe_launch(argc, argv, lo)) return *rc;
    env = dit::detect_launch_env(lo);
    dit::CommOptions co;
    co.timeout = std::chrono::seconds(f.timeout_s);
    co.shared_memory = f.transport == "auto";
    world = dit::connect_world(env, co);
    run_rank(world, f, plan);
    world->shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    dit::fail_rank(world.get(), env, e.what());
    return 1;
  }
}
