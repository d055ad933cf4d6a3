#include "models/dit_config.h"

#include "runtime/error.h"
#include "runtime/json_config.h"

namespace dit {

DiTConfig dit_config_from(const Config& c) {
  const std::string src = c.source();
  const std::string cls = c.get_string("_class_name", "DiTTransformer2DModel");
  DIT_CHECK(cls == "Transformer2DModel" || cls == "DiTTransformer2DModel",
            src << ": transformer class '" << cls
                << "' is not supported (supported: Transformer2DModel or DiTTransformer2DModel with "
                   "norm_type ada_norm_zero)");
  const std::string norm = c.get_string("norm_type", cls == "DiTTransformer2DModel" ? "ada_norm_zero" : "layer_norm");
  DIT_CHECK(norm == "ada_norm_zero", src << ": norm_type '" << norm
                                         << "' is not supported (supported: ada_norm_zero, the DiT class-conditional "
                                            "transformer)");
  const std::string act = c.get_string("activation_fn", "gelu-approximate");
  DIT_CHECK(act == "gelu-approximate", src << ": activation_fn '" << act << "' is not supported (supported: gelu-approximate)");
  DIT_CHECK(!c.has("num_vector_embeds") || c.is_null("num_vector_embeds"),
            src << ": num_vector_embeds is set: discrete (VQ) transformers are not supported");
  DIT_CHECK(!c.has("cross_attention_dim") || c.is_null("cross_attention_dim"),
            src << ": cross_attention_dim is set: text-conditioned transformers are not a DiT model");
  DIT_CHECK(c.get_bool("attention_bias", true), src << ": attention_bias=false is not supported (DiT has q/k/v biases)");
  DIT_CHECK(!c.get_bool("norm_elementwise_affine", false),
            src << ": norm_elementwise_affine=true is not supported (DiT's layer norms have no weights)");

  DiTConfig d;
  d.heads = int(c.get_int("num_attention_heads", 16));
  d.head_dim = int(c.get_int("attention_head_dim", 72));
  d.layers = int(c.get_int("num_layers", 28));
  d.sample_size = int(c.get_int("sample_size", 32));
  d.patch = int(c.get_int("patch_size", 2));
  d.in_channels = int(c.get_int("in_channels", 4));
  d.out_channels = int(c.get_int("out_channels", d.in_channels));
  d.num_classes = int(c.get_int("num_embeds_ada_norm", 1000));
  d.norm_eps = float(c.get_double("norm_eps", 1e-5));
  d.interpolation_scale = float(c.get_double("interpolation_scale", 1.0));

  auto positive = [&](const char* key, long v, long max) {
    DIT_CHECK(v > 0 && v <= max, src << ": " << key << " = " << v << " is out of range (expected 1.." << max << ")");
  };
  positive("num_attention_heads", d.heads, 1024);
  positive("attention_head_dim", d.head_dim, 4096);
  positive("num_layers", d.layers, 1024);
  positive("sample_size", d.sample_size, 1 << 14);
  positive("patch_size", d.patch, 64);
  positive("in_channels", d.in_channels, 1024);
  positive("out_channels", d.out_channels, 2048);
  positive("num_embeds_ada_norm", d.num_classes, 1 << 24);
  DIT_CHECK(long(d.heads) * d.head_dim <= 65536, src << ": hidden size heads×head_dim is too large");
  DIT_CHECK(d.out_channels == d.in_channels || d.out_channels == 2 * d.in_channels,
            src << ": out_channels " << d.out_channels << " must equal in_channels (" << d.in_channels
                << ") or twice it (learned sigma)");
  DIT_CHECK(d.sample_size % d.patch == 0,
            src << ": sample_size " << d.sample_size << " is not a multiple of patch_size " << d.patch);
  DIT_CHECK(d.norm_eps > 0 && d.interpolation_scale > 0, src << ": norm_eps and interpolation_scale must be > 0");
  return d;
}

}  // namespace dit
