// The f32 VAE decoder runs its 3×3 convolutions of 16 or more channels in and out with
// Winograd's F(4×4, 3×3) algorithm where oneDNN has it and the weights have packed entries (the
// weight cache on, dit-gen's default; runtime/conv2d_winograd.h): on the final latents of the
// independent reference's runs its image stays within 5e-6 of the reference's (the direct
// decoder's 1.2e-6 is the same order; the golden tests allow 2e-3). Without the cache the
// convolutions are direct; in bf16 they are by F(2×2, 3×3) where oneDNN has no AMX
// (tests/models/test_vae_bf16.cpp checks that image), direct with it.
#include <catch2/catch.hpp>

#include "../compute_types.h"
#include "runtime/conv2d.h"
#include "runtime/engine.h"
#include "tests/runtime/io_test_util.h"
#include "vae_util.h"

using namespace dit_test;

TEST_CASE("VAE decoder: its f32 3x3 convolutions by Winograd, the image within 5e-6 of the reference's",
          "[models][vae][winograd]") {
  const VaeGolden c = GENERATE(from_range(vae_golden_cases()));
  INFO(c.file);
  TempDir tmp;
  const dit::Tensor latents = golden(c.file, "latents"), want = golden(c.file, "image");
  int n = -1;
  const Diff d = diff(decode_vae(c.model, latents, dit::DType::F32, nullptr, tmp.path() + "/wc", &n), want);
  INFO(n << " Winograd convolutions, max abs " << d.max_abs);
  if (dit::winograd_available())
    CHECK(n > 0);
  else
    WARN("no Winograd kernel on this CPU: the direct decoder checked");
  CHECK(d.max_abs < 5e-6);
  int direct = -1;
  decode_vae(c.model, latents, dit::DType::F32, nullptr, "", &direct);
  CHECK(direct == 0);  // no cache: the transform into Winograd's layout would run at every preparation
  if (bf16_available()) {
    int bf16 = -1;
    decode_vae(c.model, latents, dit::DType::BF16, nullptr, tmp.path() + "/wc", &bf16);
    CHECK(bf16 == (dit::amx_available() ? 0 : n));
  }
}
