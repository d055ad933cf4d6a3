// dit-bench: runs every kind of layout on the tiny preset and reports what the README says.
#include <catch2/catch.hpp>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "runtime/conv2d.h"
#include "tests/compute_types.h"

using namespace dit_test;

namespace {

// The JSON document a tool prints, from a command that must exit 0 (its stderr in the report).
nlohmann::json json_of(const std::string& cmd) {
  const RunResult r = run(cmd);
  INFO(cmd << "\n" << r.err);
  REQUIRE(r.code == 0);
  return nlohmann::json::parse(r.out);
}

}  // namespace

TEST_CASE("dit-bench runs serial and parallel layouts and reports JSON", "[tools][bench]") {
  Scratch s;
  RunResult r = run(bin("dit-bench") + " --preset tiny --cache " + s.path() +
                    " --steps 2 --warmup 1 --gemm 64,64,64 --gemm-runs 1 --dtype " + compute_type_list() +
                    " --layouts serial,cfg2,u2,r2 --weight-cache " + s.file("wc"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["runs"].size() == 4 * compute_types().size());
  for (const auto& run : doc["runs"]) {
    INFO(run.dump());
    CHECK_FALSE(run.contains("error"));
    CHECK(run["step_s"].get<double>() > 0);
    // The tiny preset at its default 16x16 pixels, counted by hand: D = 4 heads x 8 = 32,
    // 2 layers, 16 tokens (8x8 latent, patch 2), batch B = 2 (guidance 4).
    //   block linears  2 layers x 2·B·N·D·(3D + D + 4D + 4D) = 1,572,864
    //   patch embed / final projection  2·B·N·D·(16 + 32)   =    98,304
    //   attention  2 layers x 4·B·N²·D                        =   131,072
    //   timestep MLPs (3: per block + final) x 2·B·(256·D + D²) = 110,592
    //   adaLN  2 layers x 2·B·D·6D = 49,152; final modulation 2·B·D·2D = 8,192
    CHECK(run["model_gflop_per_step"].get<double>() == Approx(1970176e-9).epsilon(1e-9));
    CHECK(run["tokens"] == 16);
    CHECK(run["size"] == 16);
    CHECK(run["utilisation"].get<double>() > 0);
    CHECK(run["step_s_all"].size() == 2);
    for (const char* k : {"linear", "attention", "norm_elementwise", "communication", "waiting", "conditioning", "other"})
      CHECK(run["breakdown_s_rank0"].contains(k));
    CHECK(run["pss_mb_per_rank"].size() == run["ranks"].get<size_t>());
    // The attention kernels' phases: each one's share of their thread time, adding up to 1.
    double shares = 0;
    for (const char* k : {"qk", "softmax", "pv", "rescale", "store", "prepare"}) {
      CHECK(run["attention_phase_shares_rank0"][k].get<double>() >= 0);
      shares += run["attention_phase_shares_rank0"][k].get<double>();
    }
    CHECK(shares == Approx(1.0));
    CHECK(run["attention_phase_shares_rank0"]["qk"].get<double>() > 0);
    if (run["layout"] != "serial") {
      // Parallel layouts give the serial latents within rounding (their matmuls see other row
      // counts: batch 1 per cfg2 rank, half the tokens per u2 rank; the ring merges by LSE).
      CHECK(run["latents_rel_diff_vs_serial"].get<double>() <= (run["dtype"] == "bf16" ? 1e-2 : 1e-5));
      CHECK(run["bytes_sent_per_step_all_ranks"].get<double>() > 0);
    }
    if (run["dtype"] == "bf16") {
      CHECK(run["latents_rel_diff_vs_f32"].get<double>() <= 1e-1);
      CHECK(run.contains("speedup_vs_f32"));
    }
  }
  // The preset model is created once and reused.
  CHECK(std::filesystem::exists(s.file("tiny/model_index.json")));
}

TEST_CASE("dit-bench: --dtype bf16 where the CPU has no bf16 is one clear line", "[tools][bench]") {
  if (dit::compute_supported(dit::DType::BF16)) return;  // measured by the test above
  RunResult r = run(bin("dit-bench") + " --preset tiny --layouts serial --dtype f32,bf16");
  CHECK(r.code != 0);
  CHECK(count_lines(r.err) == 1);
  CHECK_THAT(r.err, Catch::StartsWith("dit-bench: error: --dtype: bf16 compute is not available on this CPU"));
  CHECK(r.out.empty());
}

TEST_CASE("dit-bench --load-only: memory after loading for any dtype, through the weight cache", "[tools][bench]") {
  Scratch s;
  RunResult r = run(bin("dit-bench") + " --preset tiny --cache " + s.path() +
                    " --load-only --layouts serial,cfg2 --dtype f32,bf16 --weight-cache " + s.file("wc"));
  INFO(r.err);
  REQUIRE(r.code == 0);  // bf16 included: nothing is computed, so CPUs without bf16 run it too
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc["load_only"] == true);
  REQUIRE(doc["runs"].size() == 4);
  for (const auto& run : doc["runs"]) {
    INFO(run.dump());
    CHECK_FALSE(run.contains("error"));
    CHECK_FALSE(run.contains("step_s"));  // no steps were run
    CHECK(run["load_s_rank0"].get<double>() >= 0);
    CHECK(run["pss_mb_per_rank"].size() == run["ranks"].get<size_t>());
    CHECK(run["pss_mb_sum"].get<double>() > 0);
    CHECK(run.contains("pss_sum_vs_serial") == (run["layout"] == "cfg2"));
  }
  // The f32 preset loaded for bf16 compute: its bf16 copy is in the cache the ranks were given.
  int bf16_entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(s.file("wc")))
    bf16_entries += e.path().string().find(".bf16.safetensors") != std::string::npos;
  CHECK(bf16_entries == 1);
}

// --rounds: the layouts in turn, each round's speedup against that round's serial run, and
// medians over the rounds in "summary".
TEST_CASE("dit-bench --rounds alternates the layouts and reports medians of per-round ratios", "[tools][bench]") {
  Scratch s;
  RunResult r = run(bin("dit-bench") + " --preset tiny --cache " + s.path() +
                    " --steps 2 --warmup 0 --gemm 64,64,64 --gemm-runs 1 --layouts serial,cfg2 --rounds 3");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  const auto& runs = doc["runs"];
  REQUIRE(runs.size() == 6);
  std::vector<double> serial_steps, cfg2_steps, speedups;
  for (size_t i = 0; i < runs.size(); ++i) {
    INFO(runs[i].dump());
    CHECK(runs[i]["round"] == int(i / 2));                           // serial, cfg2 of round 0, then round 1, ...
    CHECK(runs[i]["layout"] == (i % 2 == 0 ? "serial" : "cfg2"));
    (i % 2 == 0 ? serial_steps : cfg2_steps).push_back(runs[i]["step_s"].get<double>());
    if (i % 2 == 1) {  // against the serial run of its own round
      speedups.push_back(runs[i]["speedup_vs_serial"].get<double>());
      CHECK(speedups.back() == Approx(serial_steps.back() / cfg2_steps.back()).epsilon(1e-12));
    }
  }
  auto median3 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[1];
  };
  const auto& sum = doc["summary"];
  REQUIRE(sum.size() == 2);
  CHECK(sum[0]["layout"] == "serial");
  CHECK(sum[0]["rounds"] == 3);
  CHECK(sum[0]["step_s_median"].get<double>() == median3(serial_steps));
  CHECK(sum[0]["step_s_rounds"].get<std::vector<double>>() == serial_steps);
  CHECK_FALSE(sum[0].contains("speedup_vs_serial_median"));
  CHECK(sum[1]["layout"] == "cfg2");
  CHECK(sum[1]["step_s_median"].get<double>() == median3(cfg2_steps));
  CHECK(sum[1]["speedup_vs_serial_median"].get<double>() == median3(speedups));
  CHECK(sum[1]["speedup_vs_serial_rounds"].get<std::vector<double>>() == speedups);

  // Against one process with all cores, when it runs first.
  RunResult all = run(bin("dit-bench") + " --preset tiny --cache " + s.path() +
                      " --steps 1 --warmup 0 --gemm 64,64,64 --gemm-runs 1 --layouts serial-all,cfg2 --rounds 2");
  REQUIRE(all.code == 0);
  const auto adoc = nlohmann::json::parse(all.out);
  REQUIRE(adoc["runs"].size() == 4);
  for (size_t i = 1; i < 4; i += 2)
    CHECK(adoc["runs"][i]["speedup_vs_serial_all"].get<double>() ==
          Approx(adoc["runs"][i - 1]["step_s"].get<double>() / adoc["runs"][i]["step_s"].get<double>()).epsilon(1e-12));
  CHECK(adoc["summary"][1]["speedup_vs_serial_all_rounds"].size() == 2);
  // serial-all runs every allowed core whatever -t the layouts get (with -t 8 on 16 cores it
  // once ran 8 threads against 2 ranks x 8 and halved the baseline).
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  const int cores = CPU_COUNT(&set);
  RunResult t = run(bin("dit-bench") + " --preset tiny --cache " + s.path() + " -t " + std::to_string(cores + 1) +
                    " --steps 1 --warmup 0 --gemm 64,64,64 --gemm-runs 1 --layouts serial-all,cfg2");
  REQUIRE(t.code == 0);
  const auto tdoc = nlohmann::json::parse(t.out);
  CHECK(tdoc["runs"][0]["threads_per_rank"] == cores);
  CHECK(tdoc["runs"][1]["threads_per_rank"] == cores + 1);

  RunResult bad = run(bin("dit-bench") + " --preset tiny --cache " + s.path() + " --rounds 0");
  CHECK(bad.code != 0);
  CHECK(bad.err == "dit-bench: error: --rounds must be in 1..1000\n");
}

TEST_CASE("dit-bench stopped by a signal reports the runs before it and which run it stopped", "[tools][bench]") {
  Scratch s;
  const std::string bench = bin("dit-bench") + " --preset tiny --cache " + s.path() +
                            " --steps 1 --warmup 0 --gemm 64,64,64 --gemm-runs 1 --layouts serial,cfg2";
  REQUIRE(run(bench).code == 0);  // the preset model made before the clock starts
  // More rounds than 10 s hold: `timeout` sends SIGTERM to the driver and its ranks mid-run
  // (or between runs), as a time limit on a lent machine does.
  RunResult r = run("timeout --preserve-status -s TERM 10 " + bench + " --rounds 1000");
  INFO(r.err);
  CHECK(r.code == 128 + 15);  // still the signal's exit code
  const auto doc = nlohmann::json::parse(r.out);
  const std::string at = doc["interrupted_at"].get<std::string>();
  CHECK((at.rfind("serial, f32, size default, round ", 0) == 0 || at.rfind("cfg2, f32, size default, round ", 0) == 0));
  CHECK(at.find(" of 1000") != std::string::npos);
  const auto& runs = doc["runs"];
  REQUIRE(runs.size() >= 1);
  CHECK(runs.size() < 2000);
  for (const auto& run : runs) CHECK(run["step_s"].get<double>() > 0);
  CHECK(doc["summary"].size() == (runs.size() >= 2 ? 2u : 1u));
  CHECK(r.err.find("dit-bench: interrupted at " + at + "; the " + std::to_string(runs.size()) +
                   " run(s) before it are reported\n") != std::string::npos);
}

TEST_CASE("dit-bench rejects a bad layout", "[tools][bench]") {
  RunResult r = run(bin("dit-bench") + " --preset tiny --layouts cfg3");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Catch::Contains("CFG degree"));
  r = run(bin("dit-bench") + " --preset tiny --layouts ,");  // was an empty run, exit 0
  CHECK(r.code != 0);
  CHECK(r.out.empty());
  CHECK_THAT(r.err, Catch::Contains("--layouts: expected one or more layouts"));
}

// Placement: local rank r on cores r*threads .. r*threads+threads-1 of the allowed set
// (parallel/placement.h); --no-pin leaves the affinity alone.
TEST_CASE("dit-bench pins each rank to its own cores, and --no-pin does not", "[tools][bench]") {
  Scratch s;
  const std::string base = bin("dit-bench") + " --preset tiny --cache " + s.path() +
                           " --steps 1 --warmup 0 --gemm 64,64,64 --gemm-runs 1 --layouts cfg2";
  RunResult r = run(base);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  const auto& run0 = doc["runs"][0];
  INFO(run0.dump());
  const int cores = doc["cpus"].get<int>();
  CHECK(run0["pinned"] == true);
  CHECK(run0["oversubscribed"] == (cores < 2));
  const auto& per = run0["per_rank"];
  REQUIRE(per.size() == 2);
  REQUIRE(per[0]["cpus"].size() == 1);
  REQUIRE(per[1]["cpus"].size() == 1);
  if (cores >= 2) CHECK(per[0]["cpus"][0] != per[1]["cpus"][0]);

  RunResult n = run(base + " --no-pin");
  INFO(n.err);
  REQUIRE(n.code == 0);
  const auto nd = nlohmann::json::parse(n.out);
  CHECK(nd["runs"][0]["pinned"] == false);
  CHECK(nd["runs"][0]["per_rank"][0]["cpus"].size() == size_t(cores));

  // With OpenMP's binding set (libgomp binds the driver's first thread to one core before
  // main) serial-all still has every core and the ranks their own.
  RunResult b = run("env OMP_PROC_BIND=true " + bin("dit-bench") + " --preset tiny --cache " + s.path() +
                    " --steps 1 --warmup 0 --gemm 64,64,64 --gemm-runs 1 --layouts serial-all,cfg2");
  INFO(b.err);
  REQUIRE(b.code == 0);
  const auto bd = nlohmann::json::parse(b.out);
  CHECK(bd["cpus"] == cores);
  CHECK(bd["runs"][0]["threads_per_rank"] == cores);
  const auto& bper = bd["runs"][1]["per_rank"];
  REQUIRE(bper.size() == 2);
  if (cores >= 2) CHECK(bper[0]["cpus"] != bper[1]["cpus"]);
}

// Several machines, simulated by two drivers on this one sharing a file: rendezvous. Node 1's
// driver starts `node1_delay` seconds after node 0's. Returns node 0's and node 1's JSON.
static std::pair<nlohmann::json, nlohmann::json> run_two_drivers(const std::string& layouts, int node1_delay = 0) {
  Scratch s;
  std::filesystem::create_directories(s.file("rdzv"));
  const std::string model_run = run(bin("dit-make-model") + " --preset tiny --out " + s.file("model")).err;
  INFO(model_run);
  const std::string base = "DIT_ADDR=127.0.0.1 " + bin("dit-bench") + " --model " + s.file("model") +
                           " --steps 1 --warmup 0 --gemm 64,64,64 --gemm-runs 1 --layouts " + layouts +
                           " --nnodes 2 --rendezvous file:" + s.file("rdzv");
  const std::string cmd = "( (sleep " + std::to_string(node1_delay) + "; " + base + " --node-rank 1 > " +
                          s.file("n1.json") + " 2> " + s.file("n1.log") + ") & " + base +
                          " --node-rank 0; rc=$?; wait $! || rc=1; exit $rc)";
  RunResult r = run(cmd);
  INFO(r.err << "\nnode 1: " << slurp(s.file("n1.log")));
  REQUIRE(r.code == 0);
  return {nlohmann::json::parse(r.out), nlohmann::json::parse(slurp(s.file("n1.json")))};
}

TEST_CASE("dit-bench runs a layout across two drivers (--nnodes 2)", "[tools][bench]") {
  const auto [doc, d1] = run_two_drivers("serial,cfg2,u2");
  REQUIRE(doc["runs"].size() == 3);
  CHECK(doc["nnodes"] == 2);
  for (const auto& run : doc["runs"]) {
    INFO(run.dump());
    CHECK_FALSE(run.contains("error"));
    if (run["layout"] != "serial") {
      CHECK(run["ranks_here"] == 1);
      CHECK(run["latents_rel_diff_vs_serial"].get<double>() <= 1e-5);
      CHECK(run.contains("speedup_vs_serial"));
    }
  }
  CHECK(d1["runs"].size() == 2);  // serial ran on machine 0 only
}

// serial-each: every driver runs serial at once, meeting first. Node 1 starts 3 s after node 0:
// without the meeting node 0's run would be over before node 1's began.
TEST_CASE("dit-bench serial-each runs serial on every machine at once (--nnodes 2)", "[tools][bench]") {
  const auto [d0, d1] = run_two_drivers("serial-each,cfg2", 3);
  REQUIRE(d0["runs"].size() == 2);
  REQUIRE(d1["runs"].size() == 2);  // serial-each ran on both machines
  const auto &e0 = d0["runs"][0], &e1 = d1["runs"][0];
  INFO(e0.dump() << "\n" << e1.dump());
  REQUIRE(e0["layout"] == "serial-each");
  REQUIRE(e1["layout"] == "serial-each");
  CHECK(e0["ranks"] == 1);
  CHECK(e0["step_s"].get<double>() > 0);
  CHECK(std::abs(e0["machines_met_unix_s"].get<double>() - e1["machines_met_unix_s"].get<double>()) < 1.0);
  const auto& c0 = d0["runs"][1];
  INFO(c0.dump());
  CHECK(c0["layout"] == "cfg2");
  CHECK(std::abs(c0["speedup_vs_serial_each"].get<double>() - e0["step_s"].get<double>() / c0["step_s"].get<double>()) <
        1e-9);
  CHECK(d0["summary"][1].contains("speedup_vs_serial_each_median"));
}

TEST_CASE("dit-bench rejects bad several-machine options", "[tools][bench]") {
  RunResult a = run(bin("dit-bench") + " --preset tiny --nnodes 2 --layouts cfg2");
  CHECK(a.code != 0);
  CHECK_THAT(a.err, Catch::Contains("--rendezvous"));
  RunResult b = run(bin("dit-bench") + " --preset tiny --nnodes 2 --rendezvous file:/tmp --layouts u3");
  CHECK(b.code != 0);
  CHECK_THAT(b.err, Catch::Contains("cannot share evenly"));
  RunResult c = run(bin("dit-bench") + " --preset tiny --nnodes 2 --node-rank 2 --rendezvous file:/tmp");
  CHECK(c.code != 0);
  CHECK_THAT(c.err, Catch::Contains("--node-rank 2"));
}

TEST_CASE("dit-comm-bench --ops ulysses times the windows against the all-to-all, each prepared first", "[tools][bench]") {
  const RunResult r = run(bin("dit-comm-bench") + " --nproc 2 --ops ulysses --tokens 64 --iters 2 --warmup 1 --dtype " +
                          compute_type_list());
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["results"].size() == compute_types().size());
  for (const auto& row : doc["results"]) {
    INFO(row.dump());
    CHECK(row["op"] == "ulysses");
    CHECK(row["tokens"] == 64);
    CHECK(row["iters"] == 4);  // 2 each way prepared first
    CHECK(row["windows_median_us"].get<double>() > 0);
    CHECK(row["all_to_all_median_us"].get<double>() > 0);
    CHECK(row["windows_over_all_to_all"].get<double>() > 0);
  }
  const RunResult one = run(bin("dit-comm-bench") + " --nproc 1 --ops ulysses --tokens 64 --iters 1");
  CHECK(one.code != 0);
  CHECK(one.err.find("--ops ulysses needs --nproc 2 or more") != std::string::npos);
  CHECK(one.out.empty());
}

TEST_CASE("dit-comm-bench refuses bad flags with one line naming the flag, before any rank starts", "[tools][bench]") {
  struct Case {
    const char* args;
    const char* message;
  } c = GENERATE(Case{"--sizes ,", "--sizes: expected one or more sizes"},  // was a SIGSEGV
                 Case{"--sizes 1x", "--sizes: '1x' is not a size"},
                 Case{"--sizes -1M", "--sizes: '-1M' is not a size"},
                 Case{"--sizes 0", "--sizes: '0' is not a size"},
                 Case{"--sizes 1e300", "--sizes: '1e300' is not a size"},  // was timed as 8 bytes
                 Case{"--sizes 1G --nproc 1024", "MB are available"},
                 Case{"--ops foo", "--ops: unknown operation 'foo'"},
                 Case{"--ops ,", "--ops: expected one or more"},
                 Case{"--nproc 1 --ops pingpong", "--ops pingpong needs --nproc 2 or more"},  // was skipped silently
                 Case{"--iters -3", "--iters"},
                 Case{"--warmup -1", "--warmup"},
                 Case{"--nproc 0", "--nproc"},
                 Case{"--ops ulysses --tokens 100000", "--tokens"},
                 Case{"--ops ulysses --dtype f64", "--dtype"});
  const RunResult r = run(bin("dit-comm-bench") + " " + c.args);  // (--nproc 2 by default)
  INFO(c.args << "\nstderr:\n" << r.err);
  CHECK(r.code != 0);
  CHECK(r.out.empty());
  CHECK(count_lines(r.err) == 1);
  CHECK(r.err.rfind("dit-comm-bench: error: ", 0) == 0);
  CHECK(r.err.find(c.message) != std::string::npos);
}

// The bf16 Winograd convolution rows also time the plan's batched matmul alone at one piece's
// shape: 16 × [tiles, C] × [C, O], the tiles whole rows of 2×2 output tiles.
TEST_CASE("dit-kernel-bench --only conv: the bf16 Winograd rows give their matmul alone", "[tools][bench]") {
  const auto doc = json_of(bin("dit-kernel-bench") + " -t 1 --only conv --runs 1 --warmup 0");
  int with_matmul = 0;
  for (const auto& row : doc["results"]) {
    INFO(row.dump());
    CHECK(row["gflops"].get<double>() > 0);
    const bool bf16_winograd = row["op"] == "conv3x3_nhwc_winograd" && row["dtype"] == "bf16";
    CHECK(row.contains("matmul_gflops") == bf16_winograd);
    if (!bf16_winograd) continue;
    ++with_matmul;
    const auto& shape = row["matmul_shape"];
    REQUIRE(shape.size() == 4);
    const int64_t ch = row["channels"].get<int64_t>(), half = row["hw"].get<int64_t>() / 2;
    CHECK(shape[0] == 16);
    CHECK(shape[1].get<int64_t>() % half == 0);
    CHECK(shape[1].get<int64_t>() / half >= 1);
    CHECK(shape[1].get<int64_t>() / half <= half);
    CHECK(shape[2] == ch);
    CHECK(shape[3] == ch);
    CHECK(row["matmul_gflops"].get<double>() > 0);
    CHECK(row["matmul_share"].get<double>() > 0);
  }
  CHECK(with_matmul == (dit_test::bf16_available() ? 3 : 0));
}

// --bf16-scale-in-qk adds, for each bf16 row, one with the softmax scale in the Q·Kᵀ matmul.
TEST_CASE("dit-kernel-bench --head-dim times attention at each head size asked for", "[tools][bench]") {
  const auto doc = json_of(bin("dit-kernel-bench") +
                           " -t 1 --only attention --no-4096 --runs 1 --warmup 0 --head-dim 8,24 --bf16-scale-in-qk");
  std::vector<int64_t> dims;
  int64_t in_qk = 0, in_softmax = 0;
  for (const auto& row : doc["results"]) {
    INFO(row.dump());
    CHECK(row["op"] == "attention");
    CHECK(row["gflops"].get<double>() > 0);
    CHECK(row["phases"]["qk"].get<double>() > 0);
    dims.push_back(row["head_dim"].get<int64_t>());
    if (row["dtype"] == "f32") CHECK(row["scale_in"] == "qk_matmul");
    if (row["dtype"] == "bf16") (row["scale_in"] == "qk_matmul" ? in_qk : in_softmax) += 1;
  }
  CHECK(in_qk == in_softmax);
  CHECK(in_qk == (dit_test::bf16_available() ? 4 : 0));
  // f32 (and bf16 twice where the CPU has it) at 256 and 1024 tokens, for each size in turn
  const size_t per = 2 * (compute_types().size() + (dit_test::bf16_available() ? 1 : 0));
  REQUIRE(dims.size() == 2 * per);
  CHECK(std::count(dims.begin(), dims.end(), 8) == int64_t(per));
  CHECK(std::count(dims.begin(), dims.end(), 24) == int64_t(per));

  RunResult bad = run(bin("dit-kernel-bench") + " --only attention --head-dim 72,0");
  CHECK(bad.code != 0);
  CHECK(bad.out.empty());
  CHECK(bad.err.find("--head-dim") != std::string::npos);
}

// --bf16-pad-qk adds, for each bf16 row, one with Q and K zero-padded to a multiple of 32.
TEST_CASE("dit-kernel-bench --bf16-pad-qk times bf16 attention with Q and K padded", "[tools][bench]") {
  const auto doc = json_of(bin("dit-kernel-bench") +
                           " -t 1 --only attention --no-4096 --runs 1 --warmup 0 --head-dim 8,72 --bf16-pad-qk");
  int64_t padded = 0, plain = 0;
  for (const auto& row : doc["results"]) {
    INFO(row.dump());
    CHECK(row["gflops"].get<double>() > 0);
    const int64_t d = row["head_dim"].get<int64_t>(), dqk = row["qk_head_dim"].get<int64_t>();
    if (dqk == d) {
      ++plain;
    } else {
      ++padded;
      CHECK(row["dtype"] == "bf16");
      CHECK(dqk == (d == 8 ? 32 : 96));
    }
  }
  CHECK(padded == (dit_test::bf16_available() ? 4 : 0));  // 2 head sizes × 256 and 1024 tokens
  CHECK(plain == 2 * 2 * int64_t(compute_types().size()));
}

// --only conv: the VAE's 3x3 convolutions in every layout, the decoder's Winograd form in f32
// among them (Winograd's kernel where oneDNN has it; the direct one it falls back to elsewhere).
TEST_CASE("dit-kernel-bench --only conv times the decoder's direct and Winograd convolutions", "[tools][bench]") {
  const auto doc = json_of(bin("dit-kernel-bench") + " -t 2 --only conv --runs 1 --warmup 0");
  int64_t winograd = 0, direct_nhwc = 0;
  for (const auto& row : doc["results"]) {
    INFO(row.dump());
    CHECK(row["gflops"].get<double>() > 0);
    if (row["op"] == "conv3x3_nhwc_winograd") {
      ++winograd;
      const std::string impl = row["impl"].get<std::string>();
      if (row["dtype"] == "bf16")
        CHECK(impl.find("winograd_f2x2_bf16") != std::string::npos);  // dit-gen's own F(2x2, 3x3)
      else if (dit::winograd_available())
        CHECK(impl.find("wino") != std::string::npos);
    }
    if (row["op"] == "conv3x3_nhwc") ++direct_nhwc;
  }
  // 512 channels at 32 x 32, 256 at 128 x 128, 128 at 256 x 256, in each compute type
  CHECK(winograd == 3 * int64_t(compute_types().size()));
  CHECK(direct_nhwc == 3 * int64_t(compute_types().size()));
}
