// PixArt-Σ/α against the independent PyTorch reference (tests/data/golden/pixart-*, made by
// pixart_reference.py and checked against diffusers): one transformer call (forward.*), and
// whole pipelines (gen.*): tokens, noise, first-step guided noise prediction, final latents
// and the decoded (and, with binning, resized and cropped) image.
#include <catch2/catch.hpp>

#include <cmath>

#include "tests/compute_types.h"
#include "golden_util.h"
#include "models/common/embeddings.h"
#include "models/dit_gen.h"
#include "models/pixart/pixart_config.h"
#include "models/pixart/pixart_transformer.h"
#include "models/pixart/pixart_weights.h"
#include "runtime/json_config.h"
#include "runtime/safetensors.h"

using namespace dit_test;
using dit::Tensor;

namespace {

Tensor f32_tensor(const std::vector<int64_t>& v, const dit::Shape& shape) {
  Tensor t = Tensor::empty(shape);
  for (size_t i = 0; i < v.size(); ++i) t.f32()[i] = float(v[i]);
  return t;
}

// The model's raw output [B, C_out, h, w] for the golden's inputs, through the serial context.
Tensor run_forward(const std::string& model, const std::string& golden_file, int image_h, int image_w,
                   dit::DType dtype) {
  const std::string dir = data_path(model);
  const dit::PixArtConfig cfg = dit::pixart_config_from(dit::Config::load(dir + "/transformer/config.json"));
  const dit::WeightStore store = dit::WeightStore::open_dir(dir + "/transformer");
  dit::PixArtTransformer m(dit::PixArtWeights::load(cfg, store, dtype, dit::QkvProjection::Auto,
                                                   *dit::make_serial_tensor_parallel()),
                          dit::make_serial_tensor_parallel());
  auto g = dit::SafeTensorsFile::open(data_path("golden/" + golden_file));
  const Tensor x = g->get("hidden_states"), text = g->get("encoder_hidden_states");
  const int64_t B = x.dim(0), h = x.dim(2), w = x.dim(3), L = text.dim(1), p = cfg.patch;
  std::vector<double> t;
  for (int64_t v : g->get_int64("timestep")) t.push_back(double(v));
  auto ctx = dit::make_serial_context();
  dit::ModelShape shape;
  shape.batch = B;
  shape.latent_h = h;
  shape.latent_w = w;
  shape.text_tokens = L;
  m.prepare(shape, *ctx);
  dit::Conditioning cond;
  cond.batch = B;
  cond.text = text;
  cond.text_mask = f32_tensor(g->get_int64("encoder_attention_mask"), {B, L});
  cond.image_height = image_h;
  cond.image_width = image_w;
  m.begin(cond);
  const int64_t N = (h / p) * (w / p), row = cfg.patch_dim_out();
  Tensor tokens = Tensor::empty({B, N, row}), out = Tensor::empty({B, int64_t(cfg.out_channels), h, w});
  m.forward(x.f32(), t.data(), tokens.f32());
  dit::unpatchify(tokens.f32(), B, h / p, w / p, p, cfg.out_channels, cfg.out_channels, out.f32());
  return out;
}

}  // namespace

TEST_CASE("PixArt-Σ transformer call matches the reference (160x224, CFG batch, masks)", "[pixart][golden]") {
  const char* f = "pixart-tiny/forward.fox.160x224.t733.g4.5.safetensors";
  const Tensor out = run_forward("pixart-tiny", f, 160, 224, dit::DType::F32);
  const Diff d = diff(out, golden(f, "model_out"));
  INFO("model_out rel " << d.rel() << " (max |ref| " << d.ref_max << ")");
  CHECK(out.shape() == golden(f, "model_out").shape());
  CHECK(d.ref_max > 0.1);
  CHECK(d.rel() < 1e-5);
  if (!dit_test::bf16_available()) return;
  const Diff b = diff(run_forward("pixart-tiny", f, 160, 224, dit::DType::BF16), golden(f, "model_out"));
  INFO("bf16 rel " << b.rel());
  CHECK(b.rel() < 3e-2);
}

TEST_CASE("PixArt-α transformer call with micro-conditions matches the reference (192x128)", "[pixart][golden]") {
  const char* f = "pixart-alpha-tiny/forward.astronaut.192x128.t250.g3.safetensors";
  auto g = dit::SafeTensorsFile::open(data_path("golden/" + std::string(f)));
  // The golden's micro-conditions are what the model derives from the image size.
  const Tensor res = g->get("resolution"), ar = g->get("aspect_ratio");
  REQUIRE(res.f32()[0] == 192.f);
  REQUIRE(res.f32()[1] == 128.f);
  REQUIRE(ar.f32()[0] == float(192.0 / 128.0));
  const Tensor out = run_forward("pixart-alpha-tiny", f, 192, 128, dit::DType::F32);
  const Diff d = diff(out, golden(f, "model_out"));
  INFO("model_out rel " << d.rel() << " (max |ref| " << d.ref_max << ")");
  CHECK(d.ref_max > 0.1);
  CHECK(d.rel() < 1e-5);
  // The size conditions matter: another size gives another output.
  const Diff other = diff(run_forward("pixart-alpha-tiny", f, 128, 192, dit::DType::F32), golden(f, "model_out"));
  CHECK(other.rel() > 1e-3);
}

namespace {

struct GenCase {
  const char* model;
  const char* file;
  const char* prompt;
  uint64_t seed;
  int steps;
  double guidance;
  int width, height;  // 0 = default
  bool binning;
  int max_length;     // 0 = default
  const char* sampler;
};

void check_generation(const GenCase& c) {
  INFO(c.file);
  dit::PipelineOptions po;
  po.model_dir = data_path(c.model);
  auto pipe = dit::Pipeline::load(po);
  dit::Request req;
  req.prompt = c.prompt;
  req.seed = c.seed;
  req.steps = c.steps;
  req.guidance_scale = c.guidance;
  req.width = c.width;
  req.height = c.height;
  req.resolution_binning = c.binning;
  req.max_sequence_length = c.max_length;
  req.sampler = c.sampler;
  req.keep_first_noise_pred = true;
  const dit::Result res = pipe->generate(req);
  auto g = dit::SafeTensorsFile::open(data_path(std::string("golden/") + c.file));
  const Diff eps0 = diff(res.first_noise_pred, g->get("eps0"));
  const Diff lat = diff(res.latents, g->get("latents"));
  // The golden image is uint8 HWC; ours [1, 3, H, W] in [0, 1] is rounded the same way.
  const int64_t H = res.image.dim(2), W = res.image.dim(3);
  REQUIRE(g->info("image").shape == dit::Shape({H, W, 3}));
  const std::vector<int64_t> px = g->get_int64("image");
  int max_px = 0, off = 0;
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x)
      for (int64_t ch = 0; ch < 3; ++ch) {
        const float v = res.image.f32()[(ch * H + y) * W + x];
        const int mine = int(std::nearbyint(v * 255.0f));
        const int d = std::abs(mine - int(px[size_t((y * W + x) * 3 + ch)]));
        max_px = std::max(max_px, d);
        off += d > 0;
      }
  INFO("eps0 rel " << eps0.rel() << ", latents rel " << lat.rel() << " (max " << lat.ref_max << "), image max diff "
                   << max_px << " levels on " << off << " values");
  CHECK(res.latents.shape() == g->get("latents").shape());
  CHECK(eps0.rel() < 1e-4);
  CHECK(lat.rel() < 1e-4);
  CHECK(max_px <= 1);
}

}  // namespace

TEST_CASE("PixArt-Σ pipeline: 256x256, CFG 4.5, DPM-Solver++ 10 steps", "[pixart][golden]") {
  check_generation({"pixart-tiny", "pixart-tiny/gen.fox.seed42.dpm10.g4.5.safetensors", "a red fox in the snow", 42, 10,
                    4.5, 0, 0, true, 0, ""});
}

TEST_CASE("PixArt-Σ pipeline: 48x80 without binning, without CFG, max length 64", "[pixart][golden]") {
  check_generation({"pixart-tiny", "pixart-tiny/gen.cabin.48x80.nobin.seed3.dpm8.g1.safetensors",
                    "a small wooden cabin next to a lake, 35mm photo", 3, 8, 1.0, 80, 48, false, 64, ""});
}

TEST_CASE("PixArt-α pipeline: 128x128 binned to 256x256 and resized back", "[pixart][golden]") {
  check_generation({"pixart-alpha-tiny", "pixart-alpha-tiny/gen.astronaut.128.bin.seed7.dpm8.g3.safetensors",
                    "an astronaut riding a horse on the moon, 4k", 7, 8, 3.0, 128, 128, true, 0, ""});
}

TEST_CASE("PixArt-α pipeline: 100x150 binned to 208x304, resized and centre-cropped", "[pixart][golden]") {
  check_generation({"pixart-alpha-tiny", "pixart-alpha-tiny/gen.lighthouse.100x150.bin.seed5.dpm6.g4.5.safetensors",
                    "a lighthouse on a rocky coast at sunset, oil painting", 5, 6, 4.5, 150, 100, true, 0, ""});
}

TEST_CASE("PixArt cross-attention reads the text tokens up to the batch's last unmasked one", "[pixart]") {
  const float m[2 * 6] = {1, 1, 0, 1, 0, 0,   // last unmasked: 3
                          1, 0, 0, 0, 0, 0};  // 0
  CHECK(dit::attended_text_tokens(m, 2, 6) == 4);
  CHECK(dit::attended_text_tokens(m + 6, 1, 6) == 1);
  const float none[2 * 3] = {1, 0, 0, 0, 0, 0};  // an item masking everything attends to all: no skipping
  CHECK(dit::attended_text_tokens(none, 2, 3) == 3);
  const float all[3] = {1, 1, 1};
  CHECK(dit::attended_text_tokens(all, 1, 3) == 3);
  const float half[3] = {1, 0.5f, 0};  // a mask value other than 0 counts as attended
  CHECK(dit::attended_text_tokens(half, 1, 3) == 2);
  // The golden transformer calls above pad their captions, so they check the skipping against diffusers.
  for (const char* f : {"pixart-tiny/forward.fox.160x224.t733.g4.5.safetensors"}) {
    auto g = dit::SafeTensorsFile::open(data_path("golden/" + std::string(f)));
    const std::vector<int64_t> mask = g->get_int64("encoder_attention_mask");
    const Tensor text = g->get("encoder_hidden_states");
    std::vector<float> mf(mask.begin(), mask.end());
    CHECK(dit::attended_text_tokens(mf.data(), text.dim(0), text.dim(1)) < text.dim(1));
  }
}
