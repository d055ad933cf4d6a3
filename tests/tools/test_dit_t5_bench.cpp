// dit-t5-bench on the tiny T5 preset: runs, prints one JSON document, counts FLOPs right.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/compute_types.h"
#include "cli_util.h"

using namespace dit_test;

TEST_CASE("dit-t5-bench: tiny preset, FLOP count against a hand count, memory figures", "[cli][t5][bench]") {
  Scratch s;
  RunResult r = run(bin("dit-t5-bench") + " --preset tiny --cache " + s.path() +
                    " --tokens 16,5 --batch 1,2 --dtype " + compute_type_list() + " --runs 1 --warmup 0 --gemm-runs 1 -t 1");
  INFO(r.err);
  REQUIRE(r.code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["tool"] == "dit-t5-bench");
  CHECK(j["config"]["d_model"] == 48);
  REQUIRE(j["runs"].size() == 4 * compute_types().size());
  // Tiny T5: d_model 48, 4 heads x 8 (inner 32), d_ff 120, 2 layers. Per layer and token:
  // q, k, v 3·2·48·32 = 9216, o 2·32·48 = 3072, wi_0 + wi_1 2·2·48·120 = 23040, wo 2·120·48 = 11520:
  // 46848 FLOP;
  // attention 4·heads·L·d_kv = 128·L per token.
  for (const auto& run : j["runs"]) {
    const double B = run["batch"], L = run["tokens"];
    const double want = 2 * (B * L * 46848 + 4 * B * 4 * L * L * 8) / 1e9;
    CHECK(run["gflop_per_encode"].get<double>() == Approx(want).epsilon(1e-12));
    CHECK(run["seconds"].get<double>() > 0);
    CHECK(run["gemm_gflops"].get<double>() > 0);
    CHECK(run["ratio_to_gemm"].get<double>() > 0);
    CHECK(run["gemm_mkn"] == std::to_string(int(B * L)) + ",48,120");
  }
  REQUIRE(j["memory"].size() == compute_types().size());  // one per compute type
  for (const auto& m : j["memory"]) {
    CHECK(m["dropped_bytes"].get<double>() > 100000);  // the mapped safetensors files
    CHECK(m["after_drop_resident_pages"]["rss_mb"].get<double>() <= m["after_encoding"]["rss_mb"].get<double>());
  }
  CHECK(j["peak_rss_mb"].get<double>() > 0);
  // The model was created once in the cache and is reused.
  RunResult again = run(bin("dit-t5-bench") + " --preset tiny --cache " + s.path() +
                        " --tokens 4 --batch 1 --dtype f32 --runs 1 --warmup 0 --gemm-runs 1 -t 1");
  REQUIRE(again.code == 0);
  CHECK(again.err.find("creating") == std::string::npos);
  CHECK(r.err.find("creating") != std::string::npos);
}

TEST_CASE("dit-t5-bench refuses bad lists with one line", "[cli][t5][bench]") {
  RunResult r = run(bin("dit-t5-bench") + " --preset tiny --tokens 0 --cache /nonexistent");
  CHECK(r.code == 1);
  CHECK(r.err.rfind("dit-t5-bench: error: --tokens", 0) == 0);
  CHECK(count_lines(r.err) == 1);
}
