// The VAE decoder's activation buffers: each of the three is sized for the largest activation
// the decoder puts in it (models/vae/vae_decoder.cpp, BufferPlan), and the image is the same.
//
// pixart-alpha-tiny's VAE has the SD VAE's shape in small: block_out_channels [8, 16, 16, 16],
// so its last up block turns 16 channels into 8 at full resolution. There, x (16 channels),
// SiLU(GN(x)) (16) and conv1's output (8) are live at once, and nothing larger is: the buffers
// need 16 + 16 + 8 channels of full-resolution rows (each band with its two halo rows), where
// three buffers of the largest activation need 3 x 16.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "golden_util.h"
#include "models/vae/vae_decoder.h"
#include "runtime/json_config.h"
#include "runtime/randn.h"
#include "runtime/safetensors.h"

using namespace dit_test;

TEST_CASE("VAE decoder: its buffers hold what is live at once, not three of the largest activation", "[models][vae]") {
  const std::string dir = data_path("pixart-alpha-tiny") + "/vae";
  const dit::VaeConfig cfg = dit::vae_config_from(dit::Config::load(dir + "/config.json"));
  REQUIRE(cfg.block_out_channels == std::vector<int>{8, 16, 16, 16});
  dit::VaeDecoder vae(cfg, dit::WeightStore::open_dir(dir), dit::DType::F32);
  const int64_t h = 6, w = 5, H = 8 * h, W = 8 * w;
  vae.prepare(1, h, w);
  const size_t row_channel = size_t(H + 2) * W * sizeof(float);  // one channel of full-resolution rows
  CHECK(vae.activation_bytes() == (16 + 16 + 8) * row_channel);
  CHECK(vae.activation_bytes() < 3 * 16 * row_channel);

  // The same image as a decoder prepared for a smaller latent first and then for this one (its
  // buffers re-planned), and finite.
  const dit::Tensor z = dit::torch_randn(7, {1, 4, h, w});
  dit::Tensor image = dit::Tensor::empty({1, 3, H, W});
  vae.decode(z.f32(), image.f32());
  dit::VaeDecoder again(cfg, dit::WeightStore::open_dir(dir), dit::DType::F32);
  again.prepare(1, 2, 3);
  again.prepare(1, h, w);
  dit::Tensor image2 = dit::Tensor::empty({1, 3, H, W});
  again.decode(z.f32(), image2.f32());
  for (int64_t i = 0; i < image.numel(); ++i) {
    REQUIRE(std::isfinite(image.f32()[i]));
    REQUIRE(image.f32()[i] == image2.f32()[i]);
  }
}
