// The VAE decoder's activation buffers: each of the three is sized for the largest activation
// the decoder puts in it (models/vae/vae_decoder_impl.h, BufferPlan), and the image is the same.
//
// pixart-alpha-tiny's VAE has the SD VAE's shape in small: block_out_channels [8, 16, 16, 16],
// so its last up block turns 16 channels into 8 at full resolution. There, x (16 channels),
// SiLU(GN(x)) (16) and conv1's output (8) are live at once, and nothing larger is: the buffers
// need 16 + 16 + 8 channels of full-resolution rows (each band with its two halo rows), where
// three buffers of the largest activation need 3 x 16. (The 1x1 shortcut's output, 8 channels,
// is written over x, piece by piece, once conv1 has read it.)
//
// With the weight cache (dit-gen's default) the f32 decoder's 3x3 convolutions of 16 channels
// and more run by Winograd, and read their GroupNorm + SiLU and their upsampled input piece by
// piece (runtime/row_sources.h), so those are never whole buffers. dit-small's VAE
// ([32, 32, 64], every resnet's convolutions by Winograd) then needs two buffers of 32 channels
// at full resolution (x and conv1's output) and no third: at half resolution the first resnet
// of the second up block holds x of 64 channels and conv1's output of 32, and its shortcut's
// output goes over x (before that was a third buffer, of 32 channels at half resolution); the
// direct decoder needs three of 32 at full resolution.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "golden_util.h"
#include "runtime/conv2d.h"
#include "runtime/weight_cache.h"
#include "tests/runtime/io_test_util.h"
#include "models/vae/vae_decoder.h"
#include "runtime/json_config.h"
#include "runtime/randn.h"
#include "tests/compute_types.h"
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

TEST_CASE("VAE decoder: with Winograd, GroupNorm and upsampling are read piece by piece, not buffered", "[models][vae][winograd]") {
  const std::string dir = data_path("dit-small") + "/vae";
  const dit::VaeConfig cfg = dit::vae_config_from(dit::Config::load(dir + "/config.json"));
  REQUIRE(cfg.block_out_channels == std::vector<int>{32, 32, 64});
  const int64_t h = 6, w = 5;
  auto full = [&](int64_t c) { return size_t(4 * h + 2) * size_t(4 * w) * size_t(c) * sizeof(float); };
  dit_test::TempDir tmp;
  for (const dit::DType compute : compute_types())
  for (const bool cache : {false, true}) {
    dit::WeightStore store = dit::WeightStore::open_dir(dir);
    if (cache) dit::use_weight_cache(store, dit::DType::F32, {tmp.path() + "/wc", false});
    dit::VaeDecoder vae(cfg, store, compute);
    vae.prepare(1, h, w);
    const bool winograd = vae.winograd_convolutions() > 0;
    INFO(dit::dtype_name(compute) << ", weight cache " << cache << ", " << vae.winograd_convolutions()
                                  << " Winograd convolutions");
    if (cache && !winograd) WARN("no Winograd form on this CPU: the direct decoder's buffers checked");
    CHECK(vae.activation_bytes() == (winograd ? 2 * full(32) : 3 * full(32)));
  }
}

// The shortcut written over its input piece by piece: output rows [a, b) go over x's rows before
// b, which the pieces so far have read. pixart-alpha-tiny's last up block narrows 16 channels to
// 8 at full resolution (48 rows of 40 pixels): pieces of 7 rows (280 pixels) and a tail of 6 give
// the bits of one piece over the whole band, with the Winograd decoder and the direct one.
TEST_CASE("VAE decoder: a shortcut over its input in pieces and a tail, the bits of one piece", "[models][vae]") {
  const std::string dir = data_path("pixart-alpha-tiny") + "/vae";
  const dit::VaeConfig cfg = dit::vae_config_from(dit::Config::load(dir + "/config.json"));
  const int64_t h = 6, w = 5, H = 8 * h, W = 8 * w;
  const dit::Tensor z = dit::torch_randn(11, {1, 4, h, w});
  dit_test::TempDir tmp;
  for (const bool cache : {false, true}) {
    dit::WeightStore store = dit::WeightStore::open_dir(dir);
    if (cache) dit::use_weight_cache(store, dit::DType::F32, {tmp.path() + "/wc", false});
    auto decode = [&](int64_t piece_pixels) {
      dit::VaeDecoder vae(cfg, store, dit::DType::F32);
      vae.set_shortcut_piece_pixels(piece_pixels);
      vae.prepare(1, h, w);
      dit::Tensor image = dit::Tensor::empty({1, 3, H, W});
      vae.decode_raw(z.f32(), image.f32());
      return image;
    };
    const dit::Tensor whole = decode(int64_t(H) * W), pieces = decode(7 * W);
    INFO("weight cache " << cache);
    for (int64_t i = 0; i < whole.numel(); ++i) {
      REQUIRE(std::isfinite(whole.f32()[i]));
      REQUIRE(pieces.f32()[i] == whole.f32()[i]);
    }
  }
}
