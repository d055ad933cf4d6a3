// dit-comm-bench: bandwidth and latency of the collectives dit-gen's parallel attention uses
// (all-to-all for Ulysses, all-gather for CFG / output gathering, send/recv for Ring), over
// Gloo TCP between local processes. Starts its own ranks with dit's launcher.
//
//   dit-comm-bench --nproc 4                      # JSON on stdout
//   dit-comm-bench --nproc 2 --sizes 16K,1M,64M --iters 20 --ops all_to_all,sendrecv
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
#include <cstdlib>
#include <cstring>
#include <cstdio>
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

size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string unit = end ? end : "";
  double mul = 1;
  if (unit == "K" || unit == "KB" || unit == "k") mul = 1024;
  else if (unit == "M" || unit == "MB") mul = 1024 * 1024;
  else if (unit == "G" || unit == "GB") mul = 1024.0 * 1024 * 1024;
  else DIT_CHECK(unit.empty(), "bad size '" << s << "' (use e.g. 16K, 4M)");
  return size_t(v * mul);
}

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dit-comm-bench: bandwidth/latency of all-to-all, all-gather and send/recv between ranks (Gloo TCP, and shared memory on one machine)"};
  int nproc = 2, iters_flag = 0, timeout_s = 300, warmup = 2;
  std::string sizes_flag = "16K,64K,256K,1M,4M,16M,64M", ops_flag = "all_to_all,all_gather,pingpong,ring";
  app.add_option("--nproc", nproc, "local processes (ranks)")->capture_default_str();
  app.add_option("--sizes", sizes_flag, "message sizes")->capture_default_str();
  app.add_option("--ops", ops_flag, "operations: all_to_all, all_gather, pingpong, ring, ulysses")->capture_default_str();
  app.add_option("--iters", iters_flag, "iterations per size (0: 5..50 by size)")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed iterations per size")->capture_default_str();
  app.add_option("--timeout", timeout_s, "communication timeout, seconds")->capture_default_str();
  int64_t tokens = 1024;
  std::string dtypes = "f32";
  app.add_option("--tokens", tokens, "ulysses: image tokens (DiT-XL/2: 1024 at 512 px, 4096 at 1024 px)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  app.add_option("--dtype", dtypes, "ulysses: compute types, comma-separated: f32, bf16")->capture_default_str();
  std::string transport = "auto";
  app.add_option("--transport", transport, dit::kTransportHelp)->check(CLI::IsMember({"auto", "tcp"}))->capture_default_str();
  if (auto rc = dit::parse_args(app, argc, argv, "dit-comm-bench")) return *rc;

  std::shared_ptr<dit::ProcessGroup> world;
  dit::LaunchEnv env;
  try {
    dit::LaunchOptions lo;
    lo.world_size = nproc;
    lo.threads = 1;
    lo.program = "dit-comm-bench";
    if (auto rc = dit::maybe_launch(argc, argv, lo)) return *rc;
    env = dit::detect_launch_env(lo);
    dit::CommOptions co;
    co.timeout = std::chrono::seconds(timeout_s);
    co.shared_memory = transport == "auto";
    world = dit::connect_world(env, co);
    dit::ProcessGroup& pg = *world;
    const int n = pg.size(), r = pg.rank();
    Bench bench{pg, warmup};
    std::vector<size_t> sizes;
    for (auto& s : split(sizes_flag)) sizes.push_back(parse_size(s));
    size_t max_size = *std::max_element(sizes.begin(), sizes.end());
    // Rounded so every rank's block is whole floats.
    auto round = [&](size_t b) { return std::max<size_t>(size_t(n) * 4, b / (size_t(n) * 4) * (size_t(n) * 4)); };
    std::vector<float> a(round(max_size) / 4 + 16, float(r)), b(round(max_size) / 4 + 16), c(round(max_size) / 4 + 16);

    nlohmann::json results = nlohmann::json::array();
    for (const auto& op : split(ops_flag)) {
      if (op == "ulysses") {
        DIT_CHECK(n > 1, "--ops ulysses needs --nproc 2 or more");
        for (const auto& dt : split(dtypes)) {
          const dit::DType dtype = dit::parse_dtype(dt);
          DIT_CHECK(dtype == dit::DType::F32 || dit::compute_supported(dtype),
                    "--dtype " << dt << ": this CPU cannot compute it");
          const int iters = iters_flag > 0 ? iters_flag : 20;
          std::vector<double> worst[2], ratios;  // [0] windows, [1] all-to-all: per iteration, the slowest rank
          for (bool windows_first : {true, false}) {
            UlyssesPair pair(world, tokens, dtype, windows_first);
            DIT_CHECK(pair.has_windows(), "--ops ulysses: the ranks have no shared-memory windows (" << pg.window_note() << ")");
            for (int i = 0; i < warmup; ++i) pair.run(true), pair.run(false);
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
          results.push_back({{"op", "ulysses"},
                             {"dtype", dit::dtype_name(dtype)},
                             {"tokens", tokens},
                             {"iters", 2 * iters},
                             {"windows_median_us", std::round(mw * 1e7) / 10},
                             {"all_to_all_median_us", std::round(ma * 1e7) / 10},
                             {"windows_over_all_to_all", std::round(ratio * 1e4) / 1e4}});
          if (r == 0)
            std::fprintf(stderr, "ulysses %-4s %6lld tokens  windows %9.1f us  all-to-all %9.1f us  ratio %.4f\n",
                         dt.c_str(), static_cast<long long>(tokens), mw * 1e6, ma * 1e6, ratio);
        }
        continue;
      }
      for (size_t size0 : sizes) {
        size_t size = round(size0);
        int iters = iters_flag > 0 ? iters_flag : int(std::clamp<size_t>((size_t(256) << 20) / size, 5, 50));
        std::vector<double> t;
        double bus_factor = double(n - 1) / n;
        if (op == "all_to_all") {
          t = bench.time(iters, [&] { pg.all_to_all(a.data(), b.data(), size / 4 / n); });
        } else if (op == "all_gather") {
          t = bench.time(iters, [&] { pg.all_gather(a.data(), b.data(), size / 4 / n); });
        } else if (op == "pingpong") {
          if (n < 2) continue;
          t = bench.time(iters, [&] {
            if (r == 0) {
              pg.send(a.data(), size, 1, 1);
              pg.recv(b.data(), size, 1, 2);
            } else if (r == 1) {
              pg.recv(b.data(), size, 0, 1);
              pg.send(b.data(), size, 0, 2);
            }
          });
          for (auto& x : t) x /= 2;  // one way
          bus_factor = 1;
        } else if (op == "ring") {
          if (n < 2) continue;
          int next = (r + 1) % n, prev = (r + n - 1) % n;
          uint32_t step = 0;
          t = bench.time(iters, [&] {
            auto s = pg.isend(a.data(), size, next, step);
            auto q = pg.irecv(c.data(), size, prev, step);
            step++;
            s.wait();
            q.wait();
          });
          bus_factor = 1;
        } else {
          DIT_FAIL("unknown op '" << op << "' (all_to_all, all_gather, pingpong, ring, ulysses)");
        }
        double med = median(t), mn = *std::min_element(t.begin(), t.end());
        double algbw = double(size) / med / 1e9;
        results.push_back({{"op", op},
                           {"bytes", size},
                           {"iters", iters},
                           {"median_us", std::round(med * 1e7) / 10},
                           {"min_us", std::round(mn * 1e7) / 10},
                           {"algbw_GBps", std::round(algbw * 1000) / 1000},
                           {"busbw_GBps", std::round(algbw * bus_factor * 1000) / 1000}});
        if (r == 0) {
          std::fprintf(stderr, "%-10s %9zu B  median %10.1f us  %7.3f GB/s\n", op.c_str(), size, med * 1e6, algbw);
        }
      }
    }
    if (r == 0) {
      nlohmann::json out = {{"tool", "dit-comm-bench"},
                            {"transport", pg.uses_shared_memory() ? "shared memory (all_to_all, all_gather), gloo tcp (send/recv)" : "gloo tcp"},
                            {"shared_memory_note", pg.shared_memory_note()},
                            {"world", n},
                            {"threads_per_rank", 1},
                            {"results", results}};
      std::printf("%s\n", out.dump(1).c_str());
    }
    world->shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    if (world)
      world->abort(e.what());
    else
      dit::report_rank_failure(env, e.what());
    return 1;
  }
}
