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
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "parallel/launcher.h"
#include "parallel/process_group.h"
#include "runtime/error.h"
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dit-comm-bench: bandwidth/latency of all-to-all, all-gather and send/recv between ranks (Gloo TCP, and shared memory on one machine)"};
  int nproc = 2, iters_flag = 0, timeout_s = 300, warmup = 2;
  std::string sizes_flag = "16K,64K,256K,1M,4M,16M,64M", ops_flag = "all_to_all,all_gather,pingpong,ring";
  app.add_option("--nproc", nproc, "local processes (ranks)")->capture_default_str();
  app.add_option("--sizes", sizes_flag, "message sizes")->capture_default_str();
  app.add_option("--ops", ops_flag, "operations")->capture_default_str();
  app.add_option("--iters", iters_flag, "iterations per size (0: 5..50 by size)")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed iterations per size")->capture_default_str();
  app.add_option("--timeout", timeout_s, "communication timeout, seconds")->capture_default_str();
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
          DIT_FAIL("unknown op '" << op << "' (all_to_all, all_gather, pingpong, ring)");
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
