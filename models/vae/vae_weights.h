// The AutoencoderKL decoder's weights as models/vae/vae_decoder.cpp loads them (docs/vae.md §2):
// f32 tensors from the VAE's WeightStore, each convolution with the packed source its weight in
// the convolution's layout is kept in (runtime/packed_weights.h). Internal to models/vae/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/linear.h"
#include "runtime/packed_source.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

namespace dit::vae {

struct ConvW {
  Tensor w, b;
  int64_t out = 0, in = 0, k = 0;
  PackedSource packed;  // where its weight in the convolution's layout is kept (none: a private reorder)
};
struct NormW {
  Tensor gamma, beta;
};
struct ResnetW {
  NormW n1, n2;
  ConvW c1, c2;
  bool has_shortcut = false;
  ConvW shortcut;
};
struct AttnW {
  NormW gn;
  LinearWeight qkv, out;
};
struct UpBlockW {
  std::vector<ResnetW> resnets;
  bool has_upsampler = false;
  ConvW upsampler;
};

// compute: the convolution's type, which its packed weight is kept in (made from the plain
// weight's mapped pages, which are given back once the entry is made).
ConvW load_conv(const WeightStore& s, const std::string& name, int64_t out, int64_t in, int64_t k, DType compute);
NormW load_norm(const WeightStore& s, const std::string& name, int64_t c);
ResnetW load_resnet(const WeightStore& s, const std::string& name, int64_t in, int64_t out, DType compute);
// The mid block's attention: Q, K and V as one [3C, C] projection; both naming styles (to_q/…,
// query/key/value/proj_attn; [C, C, 1, 1] convolution weights read as [C, C]).
AttnW load_attn(const WeightStore& s, const std::string& base, int64_t c, DType compute);

}  // namespace dit::vae
