// The VAE decoder with bf16 convolutions (--vae-dtype bf16, the default with --dtype bf16),
// on the final latents of the independent reference's runs, against the reference's image:
// bf16 multiplies 8-significant-bit weights and activations (accumulating in f32), so it is
// held to a looser bound than the f32 decoder (2e-3, as tests/models/test_golden.cpp), and it
// must differ from the f32 decoder (it really ran in bf16). The same for the bf16 decoder with the
// weight cache on, whose 3×3 convolutions are by Winograd's F(2×2, 3×3) with bf16 products where
// oneDNN has no AMX (runtime/conv2d_winograd_bf16.h; its error about twice the direct form's).
#include <catch2/catch.hpp>

#include "../compute_types.h"
#include "runtime/engine.h"
#include "tests/runtime/io_test_util.h"
#include "vae_util.h"

using namespace dit_test;


TEST_CASE("VAE decodes with bf16 convolutions close to the reference's image", "[models][vae][bf16]") {
  if (!bf16_available()) return;
  const VaeGolden c = GENERATE(from_range(vae_golden_cases()));
  const bool cache = GENERATE(false, true);  // direct; with the cache by Winograd where there is no AMX
  INFO(c.file << (cache ? ", weight cache on" : ""));
  TempDir tmp;
  const dit::Tensor latents = golden(c.file, "latents"), want = golden(c.file, "image");
  const dit::Tensor f32 = decode_vae(c.model, latents, dit::DType::F32);
  int winograd = -1;
  const dit::Tensor bf16 = decode_vae(c.model, latents, dit::DType::BF16, nullptr, cache ? tmp.path() + "/wc" : "",
                                      &winograd);
  CHECK(winograd == (cache && !dit::amx_available() ? winograd : 0));
  if (cache && !dit::amx_available()) CHECK(winograd > 0);
  const Diff d32 = diff(f32, want), d16 = diff(bf16, want), between = diff(bf16, f32);
  double mean_abs = 0;
  for (int64_t i = 0; i < want.numel(); ++i) mean_abs += std::fabs(double(bf16.f32()[i]) - want.f32()[i]);
  mean_abs /= double(want.numel());
  INFO(winograd << " Winograd convolutions; f32 max abs " << d32.max_abs << ", bf16 max abs " << d16.max_abs << " mean abs " << mean_abs
                      << ", bf16 vs f32 " << between.max_abs);
  CHECK(d32.max_abs < 2e-3);
  CHECK(d16.max_abs < 2e-2);
  CHECK(mean_abs < 3e-3);
  CHECK(between.max_abs > 1e-5);
}
