// A random AutoencoderKL decoder in diffusers' layout (vae/config.json +
// diffusion_pytorch_model.safetensors), for the models dit-gen writes itself.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "models/common/random_weights.h"
#include "runtime/dtype.h"

namespace dit {

struct RandomVae {
  std::vector<int> channels;  // block_out_channels
  int layers = 1;             // layers_per_block
  int groups = 32;            // norm_num_groups
  int latent_channels = 4;
  int sample_size = 256;      // pixels (config only)
  std::string diffusers_version = "0.4.2";
  std::optional<double> scaling_factor;  // written when set (else the 0.18215 default applies)
  std::optional<bool> force_upcast;
};

// Writes dir/config.json and dir/diffusion_pytorch_model.safetensors (post_quant_conv +
// decoder weights; a text-to-image pipeline never uses the encoder).
void write_random_vae(const RandomVae& p, const std::filesystem::path& dir, Normal& rng, DType dtype);

}  // namespace dit
