// dit-bench: runs every kind of layout on the tiny preset and reports what the README says.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "tests/compute_types.h"

using namespace dit_test;

TEST_CASE("dit-bench runs serial and parallel layouts and reports JSON", "[tools][bench]") {
  Scratch s;
  RunResult r = run(bin("dit-bench") + " --preset tiny --cache " + s.path() +
                    " --steps 2 --warmup 1 --gemm 64,64,64 --gemm-runs 1 --dtype " + compute_type_list() +
                    " --layouts serial,cfg2,u2,r2");
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
    for (const char* k : {"linear", "attention", "norm_elementwise", "communication", "waiting", "other"})
      CHECK(run["breakdown_s_rank0"].contains(k));
    CHECK(run["pss_mb_per_rank"].size() == run["ranks"].get<size_t>());
    if (run["layout"] != "serial") {
      // Parallel layouts give the serial latents (cfg2, u2 bit for bit; the ring's merge
      // within rounding of the compute type).
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

TEST_CASE("dit-bench rejects a bad layout", "[tools][bench]") {
  RunResult r = run(bin("dit-bench") + " --preset tiny --layouts cfg3");
  CHECK(r.code != 0);
  CHECK_THAT(r.err, Catch::Contains("CFG degree"));
}
