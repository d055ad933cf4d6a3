// Decoding the reference's latents with a test model's VAE (tests/data/<model>/vae).
#pragma once

#include <string>
#include <vector>

#include "golden_util.h"
#include "models/vae/vae_decoder.h"
#include "runtime/json_config.h"
#include "runtime/safetensors.h"
#include "runtime/weight_cache.h"

namespace dit_test {

// Runs of the independent reference whose final latents and image the VAE tests decode and
// compare: the test model and its golden file.
struct VaeGolden {
  const char* model;
  const char* file;
};
inline std::vector<VaeGolden> vae_golden_cases() {
  return {{"dit-tiny", "dit-tiny.ddim10.label3.seed42.g4.safetensors"},
          {"dit-small", "dit-small.dpm12.label11.seed9.g4.h48w64.safetensors"}};
}

// latents [B, C, h, w] -> image [B, 3, H, W] in [0, 1]; split: this rank's band of rows (null: all).
// cache: a weight cache directory (runtime/weight_cache.h), where the convolutions keep their
// weights packed, as dit-gen's do by default (f32: the 3x3 ones by Winograd; "": none, direct).
// *winograd (when given): how many convolutions ran Winograd's algorithm.
inline dit::Tensor decode_vae(const std::string& model, const dit::Tensor& latents, dit::DType compute,
                              dit::RowSplit* split = nullptr, const std::string& cache = "",
                              int* winograd = nullptr) {
  const std::string dir = data_path(model) + "/vae";
  dit::WeightStore store = dit::WeightStore::open_dir(dir);
  if (!cache.empty()) dit::use_weight_cache(store, dit::DType::F32, {cache, false});
  dit::VaeDecoder vae(dit::vae_config_from(dit::Config::load(dir + "/config.json")), store, compute);
  vae.prepare(latents.dim(0), latents.dim(2), latents.dim(3), split);
  if (winograd) *winograd = vae.winograd_convolutions();
  const int s = vae.config().scale();
  dit::Tensor image = dit::Tensor::empty({latents.dim(0), 3, latents.dim(2) * s, latents.dim(3) * s});
  vae.decode(latents.f32(), image.f32());
  return image;
}

}  // namespace dit_test
