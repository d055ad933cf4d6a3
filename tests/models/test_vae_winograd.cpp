// The f32 VAE decoder runs its 3×3 convolutions of 16 or more channels in and out with
// Winograd's F(4×4, 3×3) algorithm where oneDNN has it (runtime/conv2d_winograd.h): on the final
// latents of the independent reference's runs its image stays within 5e-6 of the reference's
// (the direct decoder's 1.2e-6 is the same order; the golden tests allow 2e-3), and bf16 has no
// Winograd kernel (its convolutions stay direct).
#include <catch2/catch.hpp>

#include "../compute_types.h"
#include "runtime/conv2d.h"
#include "vae_util.h"

using namespace dit_test;

namespace {
// How many of the decoder's convolutions run Winograd's algorithm for these latents.
int winograd_count(const std::string& model, const dit::Tensor& latents, dit::DType compute) {
  const std::string dir = data_path(model) + "/vae";
  dit::VaeDecoder vae(dit::vae_config_from(dit::Config::load(dir + "/config.json")), dit::WeightStore::open_dir(dir),
                      compute);
  vae.prepare(latents.dim(0), latents.dim(2), latents.dim(3));
  return vae.winograd_convolutions();
}
}  // namespace

TEST_CASE("VAE decoder: its f32 3x3 convolutions by Winograd, the image within 5e-6 of the reference's",
          "[models][vae][winograd]") {
  struct Case {
    const char* model;
    const char* file;
  };
  const Case c = GENERATE(Case{"dit-tiny", "dit-tiny.ddim10.label3.seed42.g4.safetensors"},
                          Case{"dit-small", "dit-small.dpm12.label11.seed9.g4.h48w64.safetensors"});
  INFO(c.file);
  const dit::Tensor latents = golden(c.file, "latents"), want = golden(c.file, "image");
  const int n = winograd_count(c.model, latents, dit::DType::F32);
  INFO(n << " Winograd convolutions");
  if (n == 0) WARN("no Winograd kernel on this CPU: the direct decoder checked");
  const Diff d = diff(decode_vae(c.model, latents, dit::DType::F32), want);
  INFO("max abs " << d.max_abs);
  CHECK(d.max_abs < 5e-6);
  if (bf16_available()) CHECK(winograd_count(c.model, latents, dit::DType::BF16) == 0);
}
