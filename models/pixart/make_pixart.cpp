#include "models/pixart/make_pixart.h"

#include <map>

#include "models/common/random_weights.h"
#include "models/t5/make_t5.h"
#include "models/vae/make_vae.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace dit {

namespace {

struct PixArtPreset {
  bool sigma;
  int heads, head_dim, layers, sample_size;
  MakeT5Options t5;
  RandomVae vae;
};

MakeT5Options demo_t5() {
  MakeT5Options o = MakeT5Options::tiny();  // the small trained tokenizer's vocabulary (384)
  o.d_model = 256;
  o.d_kv = 64;
  o.num_heads = 4;
  o.d_ff = 640;
  o.num_layers = 4;
  return o;
}

RandomVae vae(std::vector<int> channels, int layers, int groups, int sample_size, double scaling) {
  RandomVae v;
  v.channels = std::move(channels);
  v.layers = layers;
  v.groups = groups;
  v.sample_size = sample_size;
  v.diffusers_version = "0.20.0.dev0";
  v.scaling_factor = scaling;
  v.force_upcast = false;
  return v;
}

const std::map<std::string, PixArtPreset>& pixart_presets() {
  static const std::map<std::string, PixArtPreset> p = {
      // PixArt-Σ layout at demo size: 256×256 images (sample_size 32, the real ASPECT_RATIO_256_BIN),
      // a DiT-S/2-sized transformer, a 4-layer T5 with the small trained tokenizer.
      {"pixart-demo", {true, 6, 64, 12, 32, demo_t5(), vae({32, 64, 64, 64}, 1, 32, 256, 0.13025)}},
      // PixArt-Σ-XL-2-1024-MS dimensions (1024×1024: 4096 image tokens; T5-XXL; the SDXL VAE).
      // Use --layers / --text-layers to shorten (the full text encoder is 19 GB of f32).
      {"pixart-xl", {true, 16, 72, 28, 128, MakeT5Options::xxl(), vae({128, 256, 512, 512}, 2, 32, 1024, 0.13025)}},
  };
  return p;
}

// diffusers' random init scales as the reference uses them: weights randn·scale/sqrt(fan_in),
// biases 0.1·randn/1, tables randn/sqrt(D).
void write_transformer(const PixArtPreset& p, int layers, const std::filesystem::path& dir, Normal& rng,
                       const MakeModelOptions& opt) {
  const int64_t D = int64_t(p.heads) * p.head_dim, C = 4, P = 2, cap = p.t5.d_model;
  TensorSet t(rng, opt.dtype);
  t.random("pos_embed.proj.weight", {D, C, P, P});
  t.random("pos_embed.proj.bias", {D}, 0.1);
  t.linear("caption_projection.linear_1", D, cap);
  t.linear("caption_projection.linear_2", D, D);
  t.linear("adaln_single.emb.timestep_embedder.linear_1", D, 256, 2.0);
  t.linear("adaln_single.emb.timestep_embedder.linear_2", D, D);
  t.linear("adaln_single.linear", 6 * D, D, 0.5);
  for (int i = 0; i < layers; ++i) {
    const std::string b = "transformer_blocks." + std::to_string(i) + ".";
    t.random(b + "scale_shift_table", {6, D}, 1.0, D);
    for (const char* a : {"attn1.", "attn2."})
      for (const char* n : {"to_q", "to_k", "to_v", "to_out.0"}) t.linear(b + a + n, D, D);
    t.linear(b + "ff.net.0.proj", 4 * D, D);
    t.linear(b + "ff.net.2", D, 4 * D);
  }
  t.random("scale_shift_table", {2, D}, 1.0, D);
  t.linear("proj_out", P * P * 8, D, 0.5);
  write_sharded_safetensors(dir.string(), "diffusion_pytorch_model", t.all(), opt.shards, {{"format", "pt"}});

  nlohmann::ordered_json cfg = {{"_class_name", "Transformer2DModel"},
                                {"_diffusers_version", "0.28.0.dev0"},
                                {"activation_fn", "gelu-approximate"},
                                {"attention_bias", true},
                                {"attention_head_dim", p.head_dim},
                                {"attention_type", "default"},
                                {"caption_channels", cap},
                                {"cross_attention_dim", D},
                                {"double_self_attention", false},
                                {"dropout", 0.0},
                                {"in_channels", C},
                                {"interpolation_scale", std::max(p.sample_size / 64, 1)},
                                {"norm_elementwise_affine", false},
                                {"norm_eps", 1e-6},
                                {"norm_num_groups", 32},
                                {"norm_type", "ada_norm_single"},
                                {"num_attention_heads", p.heads},
                                {"num_embeds_ada_norm", 1000},
                                {"num_layers", layers},
                                {"num_vector_embeds", nullptr},
                                {"only_cross_attention", false},
                                {"out_channels", 8},
                                {"patch_size", P},
                                {"sample_size", p.sample_size},
                                {"upcast_attention", false},
                                {"use_additional_conditions", false},
                                {"use_linear_projection", false}};
  write_json(dir / "config.json", cfg);
}

// PixArt's scheduler_config.json (DPMSolverMultistepScheduler() defaults, as the converters
// write it), with Python's -Infinity literal like the real file.
void write_scheduler(const std::filesystem::path& dir) {
  nlohmann::ordered_json s = {{"_class_name", "DPMSolverMultistepScheduler"},
                              {"_diffusers_version", "0.22.0.dev0"},
                              {"algorithm_type", "dpmsolver++"},
                              {"beta_end", 0.02},
                              {"beta_schedule", "linear"},
                              {"beta_start", 0.0001},
                              {"dynamic_thresholding_ratio", 0.995},
                              {"euler_at_final", false},
                              {"lambda_min_clipped", "@-Infinity@"},
                              {"lower_order_final", true},
                              {"num_train_timesteps", 1000},
                              {"prediction_type", "epsilon"},
                              {"sample_max_value", 1.0},
                              {"solver_order", 2},
                              {"solver_type", "midpoint"},
                              {"steps_offset", 0},
                              {"thresholding", false},
                              {"timestep_spacing", "linspace"},
                              {"trained_betas", nullptr},
                              {"use_karras_sigmas", false},
                              {"use_lu_lambdas", false},
                              {"variance_type", nullptr}};
  std::string text = s.dump(2);
  const std::string marker = "\"@-Infinity@\"";
  text.replace(text.find(marker), marker.size(), "-Infinity");
  write_file_atomic((dir / "scheduler_config.json").string(), text.data(), text.size());
}

}  // namespace

std::vector<std::string> pixart_preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, p] : pixart_presets()) names.push_back(name);
  return names;
}

void write_pixart_pipeline(const MakeModelOptions& opt, const std::filesystem::path& dir) {
  auto it = pixart_presets().find(opt.preset);
  DIT_CHECK(it != pixart_presets().end(), "unknown PixArt preset '" << opt.preset << "'");
  const PixArtPreset& p = it->second;
  for (const char* sub : {"transformer", "vae", "scheduler"}) std::filesystem::create_directories(dir / sub);
  Normal rng(opt.seed);
  write_transformer(p, opt.layers > 0 ? opt.layers : p.layers, dir / "transformer", rng, opt);
  RandomVae v = p.vae;
  write_random_vae(v, dir / "vae", rng, opt.dtype);
  write_scheduler(dir / "scheduler");
  MakeT5Options t5 = p.t5;
  t5.out_dir = dir.string();
  t5.layers = opt.text_layers;
  t5.shards = std::max(1, opt.text_shards);
  t5.dtype = opt.dtype;
  t5.seed = opt.seed + 1;
  make_t5(t5);
  const nlohmann::ordered_json index = {{"_class_name", p.sigma ? "PixArtSigmaPipeline" : "PixArtAlphaPipeline"},
                                        {"_diffusers_version", "0.28.0.dev0"},
                                        {"scheduler", {"diffusers", "DPMSolverMultistepScheduler"}},
                                        {"text_encoder", {"transformers", "T5EncoderModel"}},
                                        {"tokenizer", {"transformers", "T5Tokenizer"}},
                                        {"transformer", {"diffusers", "Transformer2DModel"}},
                                        {"vae", {"diffusers", "AutoencoderKL"}}};
  write_json(dir / "model_index.json", index);
}

}  // namespace dit
