// --vae-parallel: the VAE decode with the image's rows split over ranks (threads of this
// process here, each with its own decoder) gives the serial decoder's image, on the final
// latents of the independent reference's runs: halo rows at every 3×3 convolution, GroupNorm
// statistics over the whole image, the mid block's attention over every pixel. Bands of one
// latent row (6 rows over 4 and 5 ranks) exercise a rank whose two halo neighbours read its
// only row. The serial decoder itself is held to the reference in tests/models/test_golden.cpp.
#include <catch2/catch.hpp>

#include <mutex>

#include "../compute_types.h"
#include "../models/vae_util.h"
#include "parallel/row_split.h"
#include "runtime/error.h"
#include "thread_ranks.h"

using namespace dit_test;


TEST_CASE("parallel VAE: the decode split over ranks gives the serial decoder's image", "[parallel][vae]") {
  struct Case {
    const char* model;
    const char* file;
    int ranks;
  };
  const Case c = GENERATE(Case{"dit-tiny", "dit-tiny.ddim10.label3.seed42.g4.safetensors", 2},
                          Case{"dit-tiny", "dit-tiny.ddim10.label3.seed42.g4.safetensors", 3},
                          Case{"dit-small", "dit-small.dpm12.label11.seed9.g4.h48w64.safetensors", 2},
                          Case{"dit-tiny", "dit-tiny.ddim10.label3.seed42.g4.safetensors", 8},
                          Case{"dit-small", "dit-small.dpm12.label11.seed9.g4.h48w64.safetensors", 5},
                          Case{"dit-small", "dit-small.dpm12.label11.seed9.g4.h48w64.safetensors", 7},
                          Case{"dit-wide", "dit-wide.ddim8.label2.seed11.g1.5.h24w16.safetensors", 4});
  const dit::DType compute = GENERATE(dit::DType::F32, dit::DType::BF16);
  if (compute == dit::DType::BF16 && !bf16_available()) return;
  INFO(c.file << " over " << c.ranks << " ranks, " << dit::dtype_name(compute));
  const dit::Tensor latents = golden(c.file, "latents");
  const dit::Tensor serial = decode_vae(c.model, latents, compute);
  std::vector<dit::Tensor> images(size_t(c.ranks));
  const std::string err = run_rank_threads(c.ranks, std::chrono::seconds(60), [&](std::shared_ptr<dit::ProcessGroup> pg, int r) {
    auto split = dit::make_row_split(pg);
    images[size_t(r)] = decode_vae(c.model, latents, compute, split.get());
  });
  REQUIRE(err.empty());
  for (int r = 0; r < c.ranks; ++r) {
    INFO("rank " << r);
    const Diff d = diff(images[size_t(r)], serial);
    INFO("max abs difference from the serial decode " << d.max_abs);
    CHECK(d.max_abs < 1e-5);
    const Diff same = diff(images[size_t(r)], images[0]);
    CHECK(same.max_abs == 0);  // every rank gets the same gathered image
  }
}

TEST_CASE("parallel VAE: a latent with fewer rows than ranks is refused on every rank", "[parallel][vae]") {
  const dit::Tensor latents = golden("dit-small.dpm12.label11.seed9.g4.h48w64.safetensors", "latents");  // 12 rows
  std::mutex mu;
  std::vector<std::string> errors;
  const std::string err = run_rank_threads(13, std::chrono::seconds(60), [&](std::shared_ptr<dit::ProcessGroup> pg, int) {
    auto split = dit::make_row_split(pg);
    try {
      decode_vae("dit-small", latents, dit::DType::F32, split.get());
    } catch (const dit::Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(e.what());
      return;
    }
    throw std::runtime_error("decoded 12 rows over 13 ranks");
  });
  REQUIRE(err.empty());
  REQUIRE(errors.size() == 13);
  for (const std::string& e : errors) CHECK_THAT(e, Catch::Contains("12 rows cannot be split over 13 ranks"));
}
