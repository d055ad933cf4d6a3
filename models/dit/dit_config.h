// Configuration of a DiT transformer (diffusers Transformer2DModel / DiTTransformer2DModel
// with norm_type "ada_norm_zero"), read from transformer/config.json with diffusers'
// defaults for missing keys.
#pragma once

#include <string>

namespace dit {

class Config;

struct DiTConfig {
  int heads = 16;
  int head_dim = 72;
  int layers = 28;
  int sample_size = 32;  // latent size the model was trained at (pos-embed base size)
  int patch = 2;
  int in_channels = 4;
  int out_channels = 8;   // 2·in_channels with learned sigma
  int num_classes = 1000; // num_embeds_ada_norm; the null (unconditional) class id
  float norm_eps = 1e-5f; // norm3 (before the MLP); norm1 and the final norm use 1e-6
  float interpolation_scale = 1.0f;

  int hidden() const { return heads * head_dim; }
  int mlp_hidden() const { return 4 * hidden(); }
  int patch_dim_in() const { return in_channels * patch * patch; }
  int patch_dim_out() const { return out_channels * patch * patch; }
  int null_class() const { return num_classes; }
};

// Parses and validates transformer/config.json; errors name the file and the key.
DiTConfig dit_config_from(const Config& cfg);

}  // namespace dit
