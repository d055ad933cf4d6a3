#include "models/dit/make_dit.h"

#include <map>

#include "models/common/random_weights.h"
#include "models/dit/imagenet_labels.h"
#include "models/vae/make_vae.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace dit {

namespace {

struct DiTPreset {
  int heads, head_dim, layers, sample_size, patch, in_channels, out_channels, classes;
  std::vector<int> vae_channels;
  int vae_layers, vae_groups;
};

const std::map<std::string, DiTPreset>& dit_presets() {
  static const std::map<std::string, DiTPreset> p = {
      // Same dimensions as dit_reference.py's presets, so golden data can be made for them.
      {"tiny", {4, 8, 2, 8, 2, 4, 8, 10, {32, 64}, 1, 32}},
      {"small", {6, 16, 3, 16, 2, 4, 8, 20, {32, 32, 64}, 2, 16}},
      // DiT-S/2-like: D=384, 6 heads, 12 layers, 256×256 output through a small 4-block VAE.
      {"demo", {6, 64, 12, 32, 2, 4, 8, 1000, {32, 64, 64, 64}, 1, 32}},
      // DiT-XL/2 dimensions with the real SD VAE dimensions (benchmarks; use --layers to shorten).
      {"xl", {16, 72, 28, 32, 2, 4, 8, 1000, {128, 256, 512, 512}, 2, 32}},
  };
  return p;
}

void write_transformer(const DiTPreset& p, const std::filesystem::path& dir, Normal& rng, const MakeModelOptions& opt) {
  const int64_t D = int64_t(p.heads) * p.head_dim, C = p.in_channels, P = p.patch;
  TensorSet t(rng, opt.dtype);
  t.random("pos_embed.proj.weight", {D, C, P, P});
  t.random("pos_embed.proj.bias", {D}, 0.1);
  // The diffusers converter copies the timestep MLP and class table into every block.
  TensorSet shared(rng, DType::F32);
  shared.linear("timestep_embedder.linear_1", D, 256);
  shared.linear("timestep_embedder.linear_2", D, D);
  shared.random("class_embedder.embedding_table.weight", {p.classes + 1, D}, 1.0, 1);
  for (int i = 0; i < p.layers; ++i) {
    const std::string b = "transformer_blocks." + std::to_string(i) + ".";
    for (auto& [name, tensor] : shared.all()) t.add(b + "norm1.emb." + name, tensor);
    t.linear(b + "norm1.linear", 6 * D, D, 0.5);
    for (const char* n : {"to_q", "to_k", "to_v", "to_out.0"}) t.linear(b + "attn1." + n, D, D);
    t.linear(b + "ff.net.0.proj", 4 * D, D);
    t.linear(b + "ff.net.2", D, 4 * D);
  }
  t.linear("proj_out_1", 2 * D, D, 0.5);
  t.linear("proj_out_2", P * P * p.out_channels, D, 0.25);
  write_sharded_safetensors(dir.string(), "diffusion_pytorch_model", t.all(), opt.shards, {{"format", "pt"}});

  nlohmann::ordered_json cfg = {{"_class_name", "Transformer2DModel"},
                                {"_diffusers_version", "0.12.0.dev0"},
                                {"activation_fn", "gelu-approximate"},
                                {"attention_bias", true},
                                {"attention_head_dim", p.head_dim},
                                {"cross_attention_dim", nullptr},
                                {"dropout", 0.0},
                                {"in_channels", p.in_channels},
                                {"norm_elementwise_affine", false},
                                {"norm_num_groups", 32},
                                {"norm_type", "ada_norm_zero"},
                                {"num_attention_heads", p.heads},
                                {"num_embeds_ada_norm", p.classes},
                                {"num_layers", p.layers},
                                {"num_vector_embeds", nullptr},
                                {"only_cross_attention", false},
                                {"out_channels", p.out_channels},
                                {"patch_size", p.patch},
                                {"sample_size", p.sample_size},
                                {"upcast_attention", false},
                                {"use_linear_projection", false}};
  write_json(dir / "config.json", cfg);
}

}  // namespace

std::vector<std::string> dit_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, p] : dit_presets()) names.push_back(name);
  return names;
}

void write_dit_pipeline(const MakeModelOptions& opt, const std::filesystem::path& tmp) {
  auto it = dit_presets().find(opt.preset);
  DIT_CHECK(it != dit_presets().end(), "unknown DiT preset '" << opt.preset << "'");
  DiTPreset p = it->second;
  if (opt.layers > 0) p.layers = opt.layers;
  for (const char* sub : {"transformer", "vae", "scheduler"}) std::filesystem::create_directories(tmp / sub);
  Normal rng(opt.seed);
  write_transformer(p, tmp / "transformer", rng, opt);
  RandomVae vae;
  vae.channels = p.vae_channels;
  vae.layers = p.vae_layers;
  vae.groups = p.vae_groups;
  vae.latent_channels = p.in_channels;
  vae.sample_size = p.sample_size * (1 << (p.vae_channels.size() - 1));
  write_random_vae(vae, tmp / "vae", rng, opt.dtype);
  nlohmann::ordered_json sched = {{"_class_name", "DDIMScheduler"},  {"_diffusers_version", "0.12.0.dev0"},
                                  {"beta_end", 0.02},                {"beta_schedule", "linear"},
                                  {"beta_start", 0.0001},            {"clip_sample", false},
                                  {"num_train_timesteps", 1000},     {"prediction_type", "epsilon"},
                                  {"set_alpha_to_one", true},        {"steps_offset", 0},
                                  {"trained_betas", nullptr}};
  write_json(tmp / "scheduler" / "scheduler_config.json", sched);
  nlohmann::ordered_json labels = nlohmann::ordered_json::object();
  for (int i = 0; i < p.classes; ++i) labels[std::to_string(i)] = imagenet_label(i);
  nlohmann::ordered_json index = {{"_class_name", "DiTPipeline"},
                                  {"_diffusers_version", "0.12.0.dev0"},
                                  {"id2label", labels},
                                  {"scheduler", {"diffusers", "DDIMScheduler"}},
                                  {"transformer", {"diffusers", "Transformer2DModel"}},
                                  {"vae", {"diffusers", "AutoencoderKL"}}};
  write_json(tmp / "model_index.json", index);
}

}  // namespace dit
