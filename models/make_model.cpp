#include "models/make_model.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "models/imagenet_labels.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

namespace dit {

namespace {

struct Preset {
  int heads, head_dim, layers, sample_size, patch, in_channels, out_channels, classes;
  std::vector<int> vae_channels;
  int vae_layers, vae_groups;
};

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> p = {
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

// Deterministic normal samples (xoshiro256** + Box-Muller): fast enough for the 700M
// weights of the xl preset, reproducible from the seed.
class Normal {
 public:
  explicit Normal(uint64_t seed) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull;
    for (auto& v : s_) {
      z += 0x9e3779b97f4a7c15ull;
      uint64_t x = z;
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      v = x ^ (x >> 31);
    }
  }
  float operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = (double(next() >> 11) + 1.0) * 0x1.0p-53, u2 = double(next() >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
    spare_ = float(r * std::sin(th));
    has_spare_ = true;
    return float(r * std::cos(th));
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  uint64_t s_[4];
  float spare_ = 0;
  bool has_spare_ = false;
};

class TensorSet {
 public:
  TensorSet(Normal& rng, DType dtype) : rng_(rng), dtype_(dtype) {}
  // randn(shape) · scale / sqrt(fan_in)  (fan_in = last dim for matrices, product of the rest for convs)
  Tensor& random(const std::string& name, const Shape& shape, double scale = 1.0, int64_t fan_in = 0) {
    if (fan_in == 0) fan_in = shape.size() > 1 ? shape_numel(shape) / shape[0] : 1;
    Tensor t = Tensor::empty(shape);
    const float s = float(scale / std::sqrt(double(fan_in)));
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng_() * s;
    return add(name, t);
  }
  Tensor& norm(const std::string& name, int64_t c) {  // affine GroupNorm: weight ≈ 1, bias ≈ 0
    Tensor w = Tensor::empty({c}), b = Tensor::empty({c});
    for (int64_t i = 0; i < c; ++i) w.f32()[i] = 1.0f + 0.1f * rng_();
    for (int64_t i = 0; i < c; ++i) b.f32()[i] = 0.1f * rng_();
    add(name + ".weight", w);
    return add(name + ".bias", b);
  }
  void linear(const std::string& name, int64_t out, int64_t in, double scale = 1.0) {
    random(name + ".weight", {out, in}, scale);
    random(name + ".bias", {out}, 0.1);
  }
  void conv(const std::string& name, int64_t out, int64_t in, int64_t k) {
    random(name + ".weight", {out, in, k, k});
    random(name + ".bias", {out}, 0.1);
  }
  Tensor& add(const std::string& name, const Tensor& t) {
    tensors_.emplace_back(name, dtype_ == DType::F32 ? t : t.to(dtype_));
    return tensors_.back().second;
  }
  std::vector<std::pair<std::string, Tensor>>& all() { return tensors_; }

 private:
  Normal& rng_;
  DType dtype_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

void write_json(const std::filesystem::path& path, const nlohmann::ordered_json& j) {
  const std::string text = j.dump(2);
  write_file_atomic(path.string(), text.data(), text.size());
}

void write_transformer(const Preset& p, const std::filesystem::path& dir, Normal& rng, const MakeModelOptions& opt) {
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

void write_vae(const Preset& p, const std::filesystem::path& dir, Normal& rng, const MakeModelOptions& opt) {
  const std::vector<int>& C = p.vae_channels;
  const int64_t lat = p.in_channels, top = C.back();
  TensorSet v(rng, opt.dtype);
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
    for (int r = 0; r <= p.vae_layers; ++r)
      resnet("decoder.up_blocks." + std::to_string(bi) + ".resnets." + std::to_string(r), r == 0 ? prev : co, co);
    if (bi != nb - 1) v.conv("decoder.up_blocks." + std::to_string(bi) + ".upsamplers.0.conv", co, co, 3);
    prev = co;
  }
  v.norm("decoder.conv_norm_out", C[0]);
  v.conv("decoder.conv_out", 3, C[0], 3);
  write_safetensors((dir / "diffusion_pytorch_model.safetensors").string(), v.all(), {{"format", "pt"}});

  nlohmann::ordered_json cfg = {{"_class_name", "AutoencoderKL"},
                                {"_diffusers_version", "0.4.2"},
                                {"act_fn", "silu"},
                                {"block_out_channels", C},
                                {"down_block_types", std::vector<std::string>(C.size(), "DownEncoderBlock2D")},
                                {"in_channels", 3},
                                {"latent_channels", p.in_channels},
                                {"layers_per_block", p.vae_layers},
                                {"norm_num_groups", p.vae_groups},
                                {"out_channels", 3},
                                {"sample_size", p.sample_size * (1 << (C.size() - 1))},
                                {"up_block_types", std::vector<std::string>(C.size(), "UpDecoderBlock2D")}};
  write_json(dir / "config.json", cfg);
}

}  // namespace

std::vector<std::string> model_presets() {
  std::vector<std::string> names;
  for (const auto& [name, p] : presets()) names.push_back(name);
  return names;
}

void make_model(const MakeModelOptions& opt) {
  namespace fs = std::filesystem;
  auto it = presets().find(opt.preset);
  if (it == presets().end()) {
    std::string all;
    for (const std::string& n : model_presets()) all += (all.empty() ? "" : ", ") + n;
    DIT_FAIL("--preset: unknown preset '" << opt.preset << "' (available: " << all << ")");
  }
  Preset p = it->second;
  if (opt.layers > 0) p.layers = opt.layers;
  DIT_CHECK(opt.layers >= 0 && opt.layers <= 1024, "--layers must be in 1..1024");
  DIT_CHECK(opt.shards >= 1 && opt.shards <= 1000, "--shards must be in 1..1000");
  DIT_CHECK(!opt.out_dir.empty(), "--out: an output directory is required");
  const fs::path out = fs::path(opt.out_dir);
  DIT_CHECK(!fs::exists(out) || (fs::is_directory(out) && fs::is_empty(out)),
            "--out: '" << opt.out_dir << "' already exists and is not an empty directory");

  // Write into a temporary sibling, then rename: an interrupted run leaves no half model.
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  fs::create_directories(parent);
  const fs::path tmp = parent / (out.filename().string() + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp);
  try {
    fs::create_directories(tmp / "transformer");
    fs::create_directories(tmp / "vae");
    fs::create_directories(tmp / "scheduler");
    Normal rng(opt.seed);
    write_transformer(p, tmp / "transformer", rng, opt);
    write_vae(p, tmp / "vae", rng, opt);
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
    if (fs::exists(out)) fs::remove(out);  // empty directory
    fs::rename(tmp, out);
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp);
    DIT_FAIL("--out: cannot write '" << opt.out_dir << "': " << e.code().message());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace dit
