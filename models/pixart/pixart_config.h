// Configuration of a PixArt transformer (diffusers Transformer2DModel /
// PixArtTransformer2DModel with norm_type "ada_norm_single"), read from transformer/config.json
// with diffusers' defaults for missing keys (docs/pixart.md).
#pragma once

namespace dit {

class Config;

struct PixArtConfig {
  int heads = 16;
  int head_dim = 72;
  int layers = 28;
  int sample_size = 128;       // latent size the model was trained at
  int patch = 2;
  int in_channels = 4;
  int out_channels = 8;        // 2·in_channels with learned sigma
  int caption_channels = 4096; // T5 d_model
  float norm_eps = 1e-6f;
  double interpolation_scale = 2;      // missing: max(sample_size // 64, 1)
  bool use_additional_conditions = false;  // missing: sample_size == 128 (α-1024's resolution/aspect embedders)

  int hidden() const { return heads * head_dim; }
  int mlp_hidden() const { return 4 * hidden(); }
  int patch_dim_in() const { return in_channels * patch * patch; }
  int patch_dim_out() const { return out_channels * patch * patch; }
};

// Parses and validates transformer/config.json; errors name the file and the key.
PixArtConfig pixart_config_from(const Config& cfg);

}  // namespace dit
