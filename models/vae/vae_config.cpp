#include "models/vae/vae_decoder.h"

#include <cmath>

#include "runtime/error.h"
#include "runtime/json_config.h"

namespace dit {

VaeConfig vae_config_from(const Config& c) {
  const std::string src = c.source();
  const std::string cls = c.get_string("_class_name", "AutoencoderKL");
  DIT_CHECK(cls == "AutoencoderKL", src << ": VAE class '" << cls << "' is not supported (supported: AutoencoderKL)");
  VaeConfig v;
  if (c.has("block_out_channels")) {
    v.block_out_channels.clear();
    for (int64_t ch : c.get_int_list("block_out_channels")) {
      DIT_CHECK(ch > 0 && ch <= 8192, src << ": block_out_channels entry " << ch << " out of range");
      v.block_out_channels.push_back(int(ch));
    }
  }
  DIT_CHECK(!v.block_out_channels.empty() && v.block_out_channels.size() <= 8,
            src << ": block_out_channels must have 1..8 entries");
  if (c.has("up_block_types"))
    for (const std::string& t : c.get_string_list("up_block_types"))
      DIT_CHECK(t == "UpDecoderBlock2D", src << ": up block type '" << t << "' is not supported (UpDecoderBlock2D)");
  v.layers_per_block = int(c.get_int("layers_per_block", 1));
  v.groups = int(c.get_int("norm_num_groups", 32));
  v.latent_channels = int(c.get_int("latent_channels", 4));
  v.out_channels = int(c.get_int("out_channels", 3));
  v.scaling_factor = c.get_double("scaling_factor", 0.18215);
  if (c.has("shift_factor") && !c.is_null("shift_factor")) v.shift_factor = c.get_double("shift_factor");
  v.use_post_quant_conv = c.get_bool("use_post_quant_conv", true);
  v.mid_block_add_attention = c.get_bool("mid_block_add_attention", true);
  const std::string act = c.get_string("act_fn", "silu");
  DIT_CHECK(act == "silu", src << ": act_fn '" << act << "' is not supported (silu)");
  DIT_CHECK(v.layers_per_block >= 0 && v.layers_per_block <= 16, src << ": layers_per_block out of range");
  DIT_CHECK(v.latent_channels > 0 && v.latent_channels <= 1024, src << ": latent_channels out of range");
  DIT_CHECK(v.out_channels == 3, src << ": out_channels " << v.out_channels << " is not supported (3, RGB)");
  DIT_CHECK(v.groups > 0, src << ": norm_num_groups must be > 0");
  for (int ch : v.block_out_channels)
    DIT_CHECK(ch % v.groups == 0, src << ": channels " << ch << " not divisible by norm_num_groups " << v.groups);
  DIT_CHECK(std::isfinite(v.scaling_factor) && v.scaling_factor != 0, src << ": scaling_factor must be finite, non-zero");
  return v;
}

}  // namespace dit
