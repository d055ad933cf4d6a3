// Golden parity: dit-gen's pipeline against the independent PyTorch reference
// (tests/data/golden/*, made by dit_reference.py; see tests/data/README.md).
#include <catch2/catch.hpp>

#include "golden_util.h"
#include "models/dit_gen.h"

using namespace dit_test;

namespace {

struct Case {
  const char* model;
  const char* file;
  const char* prompt;  // class id
  uint64_t seed;
  int steps;
  double guidance;
  const char* sampler;
  int width, height;   // 0 = default
};

void check_case(const Case& c) {
  INFO(c.file);
  dit::PipelineOptions po;
  po.model_dir = data_path(c.model);
  auto pipe = dit::Pipeline::load(po);
  dit::Request req;
  req.prompt = c.prompt;
  req.seed = c.seed;
  req.steps = c.steps;
  req.guidance_scale = c.guidance;
  req.sampler = c.sampler;
  req.width = c.width;
  req.height = c.height;
  req.keep_first_noise_pred = true;
  dit::Result res = pipe->generate(req);

  Diff eps0 = diff(res.first_noise_pred, golden(c.file, "eps0"));
  Diff lat = diff(res.latents, golden(c.file, "latents"));
  Diff img = diff(res.image, golden(c.file, "image"));
  INFO("eps0 rel " << eps0.rel() << ", latents rel " << lat.rel() << " (max " << lat.ref_max << "), image abs "
                   << img.max_abs);
  CHECK(res.latents.shape() == golden(c.file, "latents").shape());
  CHECK(res.image.shape() == golden(c.file, "image").shape());
  CHECK(eps0.rel() < 1e-5);
  CHECK(lat.rel() < 1e-4);
  CHECK(img.max_abs < 2e-3);
}

}  // namespace

TEST_CASE("golden: tiny DiT, DDIM with CFG", "[golden][models]") {
  check_case({"dit-tiny", "dit-tiny.ddim10.label3.seed42.g4.safetensors", "3", 42, 10, 4.0, "ddim", 0, 0});
}

TEST_CASE("golden: tiny DiT, DPM-Solver++ 2M with CFG", "[golden][models]") {
  check_case({"dit-tiny", "dit-tiny.dpm20.label7.seed7.g2.5.safetensors", "7", 7, 20, 2.5, "dpm++2m", 0, 0});
}

TEST_CASE("golden: tiny DiT, DDIM without CFG", "[golden][models]") {
  check_case({"dit-tiny", "dit-tiny.ddim5.label0.seed1.g1.nocfg.safetensors", "0", 1, 5, 1.0, "ddim", 0, 0});
}

TEST_CASE("golden: tiny DiT, non-square 32x16 with DPM", "[golden][models]") {
  check_case({"dit-tiny", "dit-tiny.dpm6.label9.seed5.g3.h16w32.safetensors", "9", 5, 6, 3.0, "dpm++2m", 32, 16});
}

TEST_CASE("golden: small DiT from a sharded checkpoint, 3-block VAE", "[golden][models]") {
  check_case({"dit-small", "dit-small.ddim10.label5.seed3.g3.safetensors", "5", 3, 10, 3.0, "ddim", 0, 0});
}

TEST_CASE("golden: small DiT at a non-default non-square size (pos-embed rescaling)", "[golden][models]") {
  check_case({"dit-small", "dit-small.dpm12.label11.seed9.g4.h48w64.safetensors", "11", 9, 12, 4.0, "dpm++2m", 64, 48});
}

TEST_CASE("golden: wide DiT without learned sigma, 8 heads", "[golden][models]") {
  check_case({"dit-wide", "dit-wide.ddim8.label2.seed11.g1.5.h24w16.safetensors", "2", 11, 8, 1.5, "ddim", 16, 24});
}

// Block 1 with its own timestep MLP and class table (tests/data/derive_own_embedders.py), over
// 20 steps: two windows of precomputed conditioning (models/dit/dit_conditioning.h).
TEST_CASE("golden: tiny DiT whose blocks have their own embedders, 20 DPM steps", "[golden][models]") {
  check_case({"dit-tiny-own-embedders", "dit-tiny-own-embedders.dpm20.label4.seed13.g3.safetensors", "4", 13, 20, 3.0,
              "dpm++2m", 0, 0});
}
