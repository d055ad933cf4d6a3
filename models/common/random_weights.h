// Random weights for the models dit-gen writes itself (tests, the demo, benchmarks): a fast,
// seeded normal generator and a named tensor list with the usual initialisations, plus
// the atomic JSON writer the model makers share.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace dit {

// xoshiro256** seeded by splitmix64 from `seed`: fast and reproducible.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed) {
    uint64_t z = seed;
    for (auto& v : s_) {
      z += 0x9e3779b97f4a7c15ull;
      uint64_t x = z;
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
      v = x ^ (x >> 31);
    }
  }
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

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

// Two independent standard normal samples from `rng` (Box-Muller).
inline void normal_pair(Xoshiro256& rng, float* a, float* b) {
  const double u1 = (double(rng.next() >> 11) + 1.0) * 0x1.0p-53, u2 = double(rng.next() >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1)), th = 2.0 * M_PI * u2;
  *a = float(r * std::cos(th));
  *b = float(r * std::sin(th));
}

// Deterministic normal samples one at a time: fast enough for the 700M weights of the xl
// preset, reproducible from the seed.
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed + 0x9e3779b97f4a7c15ull) {}
  float operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    float x;
    normal_pair(rng_, &x, &spare_);
    has_spare_ = true;
    return x;
  }

 private:
  Xoshiro256 rng_;
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
    float* x = t.f32();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) x[i] = rng_() * s;
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

// Writes `j` (2-space indented, a newline at the end) to `path` atomically.
void write_json(const std::filesystem::path& path, const nlohmann::ordered_json& j);

}  // namespace dit
