#include "models/dit/dit_config.h"

#include "runtime/error.h"
#include "runtime/json_config.h"

namespace dit {

DiTConfig dit_config_from(const Config& c) {
  const std::string src = c.source();
  const std::string act = c.get_string("activation_fn", "gelu-approximate");
  DIT_CHECK(act == "gelu-approximate", src << ": activation_fn '" << act << "' is not supported (supported: gelu-approximate)");
  DIT_CHECK(!c.has("num_vector_embeds") || c.is_null("num_vector_embeds"),
            src << ": num_vector_embeds is set: discrete (VQ) transformers are not supported");
  DIT_CHECK(!c.has("cross_attention_dim") || c.is_null("cross_attention_dim"),
            src << ": cross_attention_dim is set: text-conditioned transformers are not a DiT model");
  DIT_CHECK(c.get_bool("attention_bias", true), src << ": attention_bias=false is not supported (DiT has q/k/v biases)");
  DIT_CHECK(!c.get_bool("norm_elementwise_affine", false),
            src << ": norm_elementwise_affine=true is not supported (DiT's layer norms have no weights)");

  // (The transformer class and norm_type were matched to the pipeline by models/registry.cpp.)
  DiTConfig d;
  d.heads = c.get_int_in("num_attention_heads", 16, 1, 1024);
  d.head_dim = c.get_int_in("attention_head_dim", 72, 1, 4096);
  d.layers = c.get_int_in("num_layers", 28, 1, 1024);
  d.sample_size = c.get_int_in("sample_size", 32, 1, 1 << 14);
  d.patch = c.get_int_in("patch_size", 2, 1, 64);
  d.in_channels = c.get_int_in("in_channels", 4, 1, 1024);
  d.out_channels = c.get_int_in("out_channels", d.in_channels, 1, 2048);
  d.num_classes = c.get_int_in("num_embeds_ada_norm", 1000, 1, 1 << 24);
  d.norm_eps = float(c.get_double_in("norm_eps", 1e-5, 1e-12, 1.0));
  d.interpolation_scale = float(c.get_double_in("interpolation_scale", 1.0, 1e-3, 1e3));
  DIT_CHECK(long(d.heads) * d.head_dim <= 65536, src << ": hidden size heads×head_dim is too large");
  DIT_CHECK(d.out_channels == d.in_channels || d.out_channels == 2 * d.in_channels,
            src << ": out_channels " << d.out_channels << " must equal in_channels (" << d.in_channels
                << ") or twice it (learned sigma)");
  DIT_CHECK(d.sample_size % d.patch == 0,
            src << ": sample_size " << d.sample_size << " is not a multiple of patch_size " << d.patch);
  return d;
}

}  // namespace dit
