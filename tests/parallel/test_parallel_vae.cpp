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
#include "runtime/json_config.h"
#include "runtime/safetensors.h"
#include "tests/runtime/io_test_util.h"
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
  // With a weight cache, as dit-gen runs by default: the 3x3 convolutions by Winograd (f32's
  // F(4x4, 3x3); bf16's F(2x2, 3x3) where there is no AMX), in pieces of each band's rows.
  const bool cached = GENERATE(false, true);
  INFO(c.file << " over " << c.ranks << " ranks, " << dit::dtype_name(compute) << (cached ? ", weight cache" : ""));
  TempDir tmp;
  const std::string cache = cached ? tmp.path() + "/wc" : "";
  const dit::Tensor latents = golden(c.file, "latents");
  const dit::Tensor serial = decode_vae(c.model, latents, compute, nullptr, cache);
  std::vector<dit::Tensor> images(size_t(c.ranks));
  const std::string err = run_rank_threads(c.ranks, std::chrono::seconds(60), [&](std::shared_ptr<dit::ProcessGroup> pg, int r) {
    auto split = dit::make_row_split(pg);
    images[size_t(r)] = decode_vae(c.model, latents, compute, split.get(), cache);
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

// A VAE without post_quant_conv (use_post_quant_conv: false) feeds the scaled latents' band to
// conv_in directly, halo rows included. Metamorphic: it must decode like the same VAE with an
// identity post_quant_conv, serially and split over 3 ranks.
TEST_CASE("parallel VAE: without post_quant_conv, like an identity one, serial and split", "[parallel][vae]") {
  TempDir tmp;
  const std::string identity = tmp.file("identity"), none = tmp.file("none");
  const std::string weights = "/diffusion_pytorch_model.safetensors";
  for (const std::string& d : {identity, none}) std::filesystem::copy(data_path("dit-tiny/vae"), d);
  {
    auto f = dit::SafeTensorsFile::open(data_path("dit-tiny/vae") + weights);
    dit::NamedTensors all;
    for (const std::string& n : f->names()) {
      dit::Tensor t = f->get(n).to(dit::DType::F32).clone();
      if (n == "post_quant_conv.weight") {
        REQUIRE(t.numel() == 16);  // [4, 4, 1, 1]
        for (int i = 0; i < 16; ++i) t.f32()[i] = i % 5 == 0 ? 1.f : 0.f;
      }
      if (n == "post_quant_conv.bias")
        for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 0.f;
      all.emplace_back(n, t);
    }
    std::filesystem::remove(identity + weights);
    dit::write_safetensors(identity + weights, all);
  }
  std::string cfg = read_bytes(none + "/config.json");
  const size_t brace = cfg.rfind('}');
  REQUIRE(brace != std::string::npos);
  cfg.insert(brace, ", \"use_post_quant_conv\": false\n");
  write_bytes(none + "/config.json", cfg);
  auto decode_dir = [](const std::string& dir, const dit::Tensor& latents, dit::RowSplit* split) {
    dit::VaeConfig c = dit::vae_config_from(dit::Config::load(dir + "/config.json"));
    dit::VaeDecoder vae(c, dit::WeightStore::open_dir(dir));
    vae.prepare(1, latents.dim(2), latents.dim(3), split);
    const int s = c.scale();
    dit::Tensor image = dit::Tensor::empty({1, 3, latents.dim(2) * s, latents.dim(3) * s});
    vae.decode(latents.f32(), image.f32());
    return image;
  };
  REQUIRE_FALSE(dit::vae_config_from(dit::Config::load(none + "/config.json")).use_post_quant_conv);
  const dit::Tensor latents = golden("dit-tiny.ddim10.label3.seed42.g4.safetensors", "latents");
  const dit::Tensor with_identity = decode_dir(identity, latents, nullptr);
  const dit::Tensor without = decode_dir(none, latents, nullptr);
  CHECK(diff(without, with_identity).max_abs < 1e-6);
  std::vector<dit::Tensor> images(3);
  const std::string err = run_rank_threads(3, std::chrono::seconds(60), [&](std::shared_ptr<dit::ProcessGroup> pg, int r) {
    auto split = dit::make_row_split(pg);
    images[size_t(r)] = decode_dir(none, latents, split.get());
  });
  REQUIRE(err.empty());
  for (const dit::Tensor& im : images) CHECK(diff(im, without).max_abs < 1e-5);
}
