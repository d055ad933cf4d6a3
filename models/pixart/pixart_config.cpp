#include "models/pixart/pixart_config.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/json_config.h"

namespace dit {

PixArtConfig pixart_config_from(const Config& c) {
  const std::string src = c.source();
  // (The transformer class and norm_type were matched to the pipeline by models/registry.cpp.)
  const std::string act = c.get_string("activation_fn", "gelu-approximate");
  DIT_CHECK(act == "gelu-approximate", src << ": activation_fn '" << act << "' is not supported (supported: gelu-approximate)");
  DIT_CHECK(c.get_bool("attention_bias", true), src << ": attention_bias=false is not supported (PixArt has q/k/v biases)");
  DIT_CHECK(!c.get_bool("norm_elementwise_affine", false),
            src << ": norm_elementwise_affine=true is not supported (PixArt's layer norms have no weights)");
  DIT_CHECK(c.get_string("attention_type", "default") == "default",
            src << ": attention_type '" << c.get_string("attention_type") << "' is not supported (supported: default)");
  for (const char* key : {"only_cross_attention", "double_self_attention", "upcast_attention", "use_linear_projection"})
    DIT_CHECK(!c.get_bool(key, false), src << ": " << key << "=true is not supported by PixArt");
  DIT_CHECK(!c.has("num_vector_embeds") || c.is_null("num_vector_embeds"),
            src << ": num_vector_embeds is set: discrete (VQ) transformers are not supported");

  PixArtConfig p;
  p.heads = c.get_int_in("num_attention_heads", 16, 1, 1024);
  p.head_dim = c.get_int_in("attention_head_dim", 72, 1, 4096);
  p.layers = c.get_int_in("num_layers", 28, 1, 1024);
  p.sample_size = c.get_int_in("sample_size", 128, 1, 1 << 14);
  p.patch = c.get_int_in("patch_size", 2, 1, 64);
  p.in_channels = c.get_int_in("in_channels", 4, 1, 1024);
  p.out_channels = c.get_int_in("out_channels", p.in_channels, 1, 2048);
  p.caption_channels = c.get_int_in("caption_channels", 4096, 1, 1 << 16);
  p.norm_eps = float(c.get_double_in("norm_eps", 1e-6, 1e-12, 1.0));
  p.interpolation_scale = c.get_double_in("interpolation_scale", std::max(p.sample_size / 64, 1), 1e-3, 1e3);
  p.use_additional_conditions = c.get_bool("use_additional_conditions", p.sample_size == 128);

  DIT_CHECK(long(p.heads) * p.head_dim <= 65536, src << ": hidden size heads×head_dim is too large");
  const int D = p.hidden();
  const int cross = c.get_int_in("cross_attention_dim", D, 1, 1 << 16);
  DIT_CHECK(cross == D, src << ": cross_attention_dim " << cross << " must equal heads × head_dim = " << D
                            << " (PixArt projects the caption to the hidden size)");
  DIT_CHECK(p.out_channels == p.in_channels || p.out_channels == 2 * p.in_channels,
            src << ": out_channels " << p.out_channels << " must equal in_channels (" << p.in_channels
                << ") or twice it (learned sigma)");
  DIT_CHECK(!p.use_additional_conditions || D % 3 == 0,
            src << ": use_additional_conditions needs a hidden size divisible by 3, got " << D);
  DIT_CHECK(p.sample_size % p.patch == 0,
            src << ": sample_size " << p.sample_size << " is not a multiple of patch_size " << p.patch);
  return p;
}

}  // namespace dit
