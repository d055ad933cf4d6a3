#include "models/vae/make_vae.h"

#include "runtime/safetensors.h"

namespace dit {

void write_random_vae(const RandomVae& p, const std::filesystem::path& dir, Normal& rng, DType dtype) {
  const std::vector<int>& C = p.channels;
  const int64_t lat = p.latent_channels, top = C.back();
  TensorSet v(rng, dtype);
  auto resnet = [&](const std::string& name, int64_t in, int64_t out) {
    v.norm(name + ".norm1", in);
    v.conv(name + ".conv1", out, in, 3);
    v.norm(name + ".norm2", out);
    v.conv(name + ".conv2", out, out, 3);
    if (in != out) v.conv(name + ".conv_shortcut", out, in, 1);
  };
  v.conv("post_quant_conv", lat, lat, 1);
  v.conv("decoder.conv_in", top, lat, 3);
  resnet("decoder.mid_block.resnets.0", top, top);
  v.norm("decoder.mid_block.attentions.0.group_norm", top);
  for (const char* n : {"to_q", "to_k", "to_v", "to_out.0"}) v.linear(std::string("decoder.mid_block.attentions.0.") + n, top, top);
  resnet("decoder.mid_block.resnets.1", top, top);
  int64_t prev = top;
  const int nb = int(C.size());
  for (int bi = 0; bi < nb; ++bi) {
    const int64_t co = C[nb - 1 - bi];
    for (int r = 0; r <= p.layers; ++r)
      resnet("decoder.up_blocks." + std::to_string(bi) + ".resnets." + std::to_string(r), r == 0 ? prev : co, co);
    if (bi != nb - 1) v.conv("decoder.up_blocks." + std::to_string(bi) + ".upsamplers.0.conv", co, co, 3);
    prev = co;
  }
  v.norm("decoder.conv_norm_out", C[0]);
  v.conv("decoder.conv_out", 3, C[0], 3);
  write_safetensors((dir / "diffusion_pytorch_model.safetensors").string(), v.all(), {{"format", "pt"}});

  nlohmann::ordered_json cfg = {{"_class_name", "AutoencoderKL"},
                                {"_diffusers_version", p.diffusers_version},
                                {"act_fn", "silu"},
                                {"block_out_channels", C},
                                {"down_block_types", std::vector<std::string>(C.size(), "DownEncoderBlock2D")}};
  if (p.force_upcast) cfg["force_upcast"] = *p.force_upcast;
  cfg["in_channels"] = 3;
  cfg["latent_channels"] = p.latent_channels;
  cfg["layers_per_block"] = p.layers;
  cfg["norm_num_groups"] = p.groups;
  cfg["out_channels"] = 3;
  cfg["sample_size"] = p.sample_size;
  if (p.scaling_factor) cfg["scaling_factor"] = *p.scaling_factor;
  cfg["up_block_types"] = std::vector<std::string>(C.size(), "UpDecoderBlock2D");
  write_json(dir / "config.json", cfg);
}

}  // namespace dit
