#include "models/vae/vae_weights.h"

#include <cstring>

#include "runtime/error.h"

namespace dit::vae {

namespace {

Tensor f32(const Tensor& t) { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }

// A [C, C] projection stored as to_q (new name) or query (old name), or as a [C, C, 1, 1] conv.
Tensor attn_weight(const WeightStore& s, const std::string& base, const std::string& now, const std::string& old,
                   const std::string& suffix, const Shape& shape) {
  std::string name = base + now + suffix;
  if (!s.has(name) && s.has(base + old + suffix)) name = base + old + suffix;
  Tensor t = s.get(name);
  if (t.ndim() == 4 && shape.size() == 2 && t.dim(2) == 1 && t.dim(3) == 1) t = t.reshape({t.dim(0), t.dim(1)});
  DIT_CHECK(t.shape() == shape, s.describe() << ": tensor '" << name << "' has shape " << shape_str(t.shape())
                                             << ", expected " << shape_str(shape));
  return f32(t);
}

}  // namespace

ConvW load_conv(const WeightStore& s, const std::string& name, int64_t out, int64_t in, int64_t k, DType compute) {
  ConvW c{f32(s.get(name + ".weight", {out, in, k, k})), f32(s.get(name + ".bias", {out})), out, in, k,
          s.packed_source(name + ".weight", compute)};
  if (c.packed) c.packed.release_plain = s.releaser(c.w);  // (a no-op for a private copy)
  return c;
}
NormW load_norm(const WeightStore& s, const std::string& name, int64_t c) {
  return {f32(s.get(name + ".weight", {c})), f32(s.get(name + ".bias", {c}))};
}
ResnetW load_resnet(const WeightStore& s, const std::string& name, int64_t in, int64_t out, DType compute) {
  ResnetW r;
  r.n1 = load_norm(s, name + ".norm1", in);
  r.c1 = load_conv(s, name + ".conv1", out, in, 3, compute);
  r.n2 = load_norm(s, name + ".norm2", out);
  r.c2 = load_conv(s, name + ".conv2", out, out, 3, compute);
  r.has_shortcut = in != out;
  if (r.has_shortcut) r.shortcut = load_conv(s, name + ".conv_shortcut", out, in, 1, compute);
  return r;
}

AttnW load_attn(const WeightStore& s, const std::string& base, int64_t c, DType compute) {
  AttnW a;
  a.gn = load_norm(s, base + "group_norm", c);
  const char* now[] = {"to_q", "to_k", "to_v"};
  const char* old[] = {"query", "key", "value"};
  std::vector<Tensor> w, b;
  for (int i = 0; i < 3; ++i) {
    w.push_back(attn_weight(s, base, now[i], old[i], ".weight", {c, c}));
    b.push_back(attn_weight(s, base, now[i], old[i], ".bias", {c}).reshape({1, c}));
  }
  Tensor wqkv = Tensor::empty({3 * c, c}), bqkv = Tensor::empty({3 * c});
  for (int i = 0; i < 3; ++i) {
    std::memcpy(wqkv.f32() + i * c * c, w[i].f32(), c * c * 4);
    std::memcpy(bqkv.f32() + i * c, b[i].f32(), c * 4);
  }
  a.qkv = LinearWeight::prepare(wqkv, bqkv, compute);
  a.out = LinearWeight::prepare(attn_weight(s, base, "to_out.0", "proj_attn", ".weight", {c, c}),
                                attn_weight(s, base, "to_out.0", "proj_attn", ".bias", {c}), compute);
  return a;
}

}  // namespace dit::vae
