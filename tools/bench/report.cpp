#include "tools/bench/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "parallel/mesh.h"

namespace dit::bench {

double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.empty() || a.size() != b.size()) return -1;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * (a[i] - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Every rank's memory: peak RSS, RSS and PSS now, and the PSS summed (shared pages once).
void add_memory_summary(json& run, const std::vector<json>& ranks) {
  double pss_sum = 0;
  json rss = json::array(), pss = json::array(), cur_rss = json::array();
  for (const json& r : ranks) {
    pss_sum += r["pss_mb"].get<double>();
    rss.push_back(r["peak_rss_mb"]);
    pss.push_back(r["pss_mb"]);
    cur_rss.push_back(r["rss_mb"]);
  }
  run["peak_rss_mb_per_rank"] = rss;
  run["rss_mb_per_rank"] = cur_rss;
  run["pss_mb_per_rank"] = pss;
  run["pss_mb_sum"] = pss_sum;
}

// The step's figures from rank 0's result (and every local rank's memory and breakdown).
void add_step_figures(json& run, const Layout& lay, const json& r0, const std::vector<json>& ranks, int ranks_here) {
  const int world = lay.deg.world();
  const std::string dtype = run["dtype"];
  const double step = r0["step_median_s"].get<double>();
  const json& F = r0["flops"];
  const double fa = F["attention"].get<double>(), flin = F["linear"].get<double>();
  const double fx = F["cross_attention"].get<double>();
  const double fl = flin + fa + fx + F["conditioning"].get<double>();
  const double gemm = r0[dtype == "bf16" ? "gemm_bf16_gflops" : "gemm_f32_gflops"].get<double>();
  const int rank_threads = r0["threads"].get<int>();
  run["threads_per_rank"] = rank_threads;
  if (lay.deg[Axis::Ulysses] > 1 && lay.deg[Axis::Ring] == 1)  // USP runs unchunked
    run["ulysses_chunks"] = r0["ulysses_chunks"];
  if (lay.deg.world() > 1) run["share_rows"] = r0["share_rows"];
  run["pinned"] = r0["pinned"];
  run["oversubscribed"] = r0["oversubscribed"];  // local ranks x threads > cores: core sets overlap
  if (ranks_here > 0) run["ranks_here"] = ranks_here;
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
  // Rank 0's attention kernels (self and cross), each phase's share of their thread time.
  double phase_total = 0;
  for (const auto& [name, s] : r0["attention_phases_thread_s"].items()) phase_total += s.get<double>();
  if (phase_total > 0) {
    json shares;
    for (const auto& [name, s] : r0["attention_phases_thread_s"].items()) shares[name] = s.get<double>() / phase_total;
    run["attention_phase_shares_rank0"] = shares;
  }
  double bytes = 0;
  for (const json& r : ranks) bytes += r["bytes_sent_per_step"].get<double>();
  run["bytes_sent_per_step_all_ranks"] = bytes;
  if (world > 1) {  // each rank's own view: who waits for whom
    json per = json::array();
    for (const json& r : ranks)
      per.push_back({{"rank", r["rank"]}, {"cpus", r["cpus"]},
                     {"step_s", r["step_median_s"]}, {"gemm_f32_gflops", r["gemm_f32_gflops"]},
                     {"breakdown_s", r["breakdown_s"]},
                     {"rows_for_others_per_step", r["rows_for_others_per_step"]},
                     {"shm_mb_2mb_pages", r.value("shm_mb_2mb_pages", 0.0)},
                     {"shm_mb_4kb_pages", r.value("shm_mb_4kb_pages", 0.0)}});
    run["per_rank"] = per;
  }
  add_memory_summary(run, ranks);
}

// Per layout, dtype and size, the medians over the rounds of the step and of each round's
// speedup over that round's serial run (ratios taken within a round: the same machine state),
// with every round's value. Runs that failed are left out (the runs array has their error).
json summarize(const json& runs) {
  json out = json::array();
  std::vector<std::string> order;
  std::map<std::string, std::vector<const json*>> groups;
  for (const json& r : runs) {
    if (r.contains("error")) continue;
    const std::string key = r["layout"].get<std::string>() + " " + r["dtype"].get<std::string>() + " " +
                            std::to_string(r["size"].get<int>());
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(&r);
  }
  for (const std::string& key : order) {
    const std::vector<const json*>& g = groups[key];
    json s;
    s["layout"] = (*g[0])["layout"];
    s["dtype"] = (*g[0])["dtype"];
    s["size"] = (*g[0])["size"];
    s["ranks"] = (*g[0])["ranks"];
    s["rounds"] = g.size();
    for (const char* field : {"step_s", "speedup_vs_serial", "speedup_vs_serial_all", "speedup_vs_serial_each",
                              "speedup_vs_f32", "pss_mb_sum",
                              "pss_sum_vs_serial"}) {  // the median and every round's value
      std::vector<double> v;
      for (const json* r : g)
        if (r->contains(field)) v.push_back((*r)[field].get<double>());
      if (v.empty()) continue;
      s[std::string(field) + "_median"] = median(v);
      s[std::string(field) + "_rounds"] = v;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace dit::bench
