// AutoencoderKL decoder (diffusers, docs/vae.md): post_quant_conv, conv_in, mid block
// (resnet, single-head attention, resnet), up blocks of resnets with nearest-2x upsamplers,
// GroupNorm + SiLU + conv_out. Any number of blocks, groups and layers from the config;
// both attention naming styles (to_q/… and the old query/key/value/proj_attn).
//
//   VaeConfig cfg = vae_config_from(Config::load(dir + "/vae/config.json"));
//   VaeDecoder vae(cfg, WeightStore::open_dir(dir + "/vae"), DType::F32);   // or BF16 (AVX-512)
//   vae.prepare(1, 32, 32);                     // latent size; primitives + buffers
//   vae.decode(latents, image);                 // latents [1,4,32,32] -> image [1,3,256,256] in [0,1]
//
// Split over ranks (--vae-parallel): every rank prepares with the same RowSplit (parallel/),
// decodes its band of rows from the whole latents, and gets the whole image.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/attention.h"
#include "runtime/conv2d.h"
#include "runtime/linear.h"
#include "runtime/tensor.h"

namespace dit {

class Config;
class RowSplit;
class WeightStore;

struct VaeConfig {
  std::vector<int> block_out_channels{128, 256, 512, 512};
  int layers_per_block = 2;
  int groups = 32;
  int latent_channels = 4;
  int out_channels = 3;
  double scaling_factor = 0.18215;
  std::optional<double> shift_factor;
  bool use_post_quant_conv = true;
  bool mid_block_add_attention = true;
  // Pixels per latent: 2^(blocks - 1) (8 for the real 4-block VAEs).
  int scale() const { return 1 << (int(block_out_channels.size()) - 1); }
};

VaeConfig vae_config_from(const Config& cfg);

// image = clamp(image / 2 + 0.5, 0, 1) (diffusers' denormalisation), in place.
void to_unit_range(float* image, int64_t n);

class VaeDecoder {
 public:
  // compute: the convolutions' and the mid-block attention's matmul type. BF16 multiplies bf16
  // weights and activations with f32 accumulation; activations between layers, GroupNorm and
  // the output stay f32.
  VaeDecoder(const VaeConfig& cfg, const WeightStore& store, DType compute = DType::F32);
  ~VaeDecoder();
  const VaeConfig& config() const { return cfg_; }
  // Primitives and buffers for latents [batch, C, h, w], decoding the band of rows `split`
  // gives this rank (every row when null); the split must outlive the decodes. Needs
  // h >= split->parts().
  void prepare(int64_t batch, int64_t h, int64_t w, RowSplit* split = nullptr);
  // latents: [batch, C, h, w] as the sampler leaves them (before 1/scaling_factor);
  // image: [batch, 3, h·scale, w·scale], (x/2 + 0.5) clamped to [0, 1].
  void decode(const float* latents, float* image);
  // The same before the last step: the decoder's output, nominally in [-1, 1] (what diffusers
  // resizes when it bins resolutions), for to_unit_range() afterwards.
  void decode_raw(const float* latents, float* image);
  // How many of the prepared convolutions run Winograd's algorithm (f32 3×3 ones where oneDNN
  // has it; DIT_VAE_WINOGRAD=off: none), for -v and the tests.
  int winograd_convolutions() const;
  // Bytes of the activation buffers prepare() made (up to three), each sized for the largest
  // activation the decoder's steps put in it (the SD VAE's at full resolution: 256, 256 and 128
  // channels with direct convolutions, 256 and 128 by Winograd; not three times 256), for the tests.
  size_t activation_bytes() const;
  // Output pixels a piece of a shortcut written over its input (a 1x1 convolution that narrows
  // the channels: x's buffer takes its output, piece by piece; default 4096), for the next
  // prepare(); the tests give a few, for several pieces and a tail at their small sizes.
  void set_shortcut_piece_pixels(int64_t pixels);
  // Whether a decoder computing in `compute` runs its 3×3 convolutions (16 channels and more)
  // by Winograd's algorithm, with the weight cache on (their weights are transformed once into
  // its layout there), unless DIT_VAE_WINOGRAD=off: f32 by oneDNN's F(4×4, 3×3) where oneDNN has
  // it; bf16 by F(2×2, 3×3) with bf16 products (runtime/conv2d_winograd_bf16.h) on CPUs where
  // oneDNN has no AMX (1.5× its direct bf16 kernel on the AVX512_BF16 VM), and with AMX too
  // under DIT_VAE_WINOGRAD=all (to compare the two there).
  static bool winograd_for(DType compute, bool weight_cache);

 private:
  struct Impl;
  VaeConfig cfg_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dit
