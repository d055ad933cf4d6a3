#include "runtime/randn.h"

#include <cmath>

#include "runtime/error.h"

namespace dit {
namespace {

// The standard 32-bit Mersenne Twister, seeded like torch (init_genrand, low 32 bits).
class MT19937 {
 public:
  explicit MT19937(uint64_t seed) {
    state_[0] = uint32_t(seed & 0xffffffffu);
    for (int i = 1; i < kN; ++i) state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + uint32_t(i);
    index_ = kN;
  }

  uint32_t next() {
    if (index_ >= kN) twist();
    uint32_t y = state_[index_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
  }

  // torch's uniform_real_distribution<float>(0, 1): 24 random bits scaled by 2^-24.
  float uniform() { return float(next() & 0xffffffu) * (1.0f / 16777216.0f); }

 private:
  static constexpr int kN = 624, kM = 397;
  void twist() {
    for (int i = 0; i < kN; ++i) {
      uint32_t y = (state_[i] & 0x80000000u) | (state_[(i + 1) % kN] & 0x7fffffffu);
      state_[i] = state_[(i + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  uint32_t state_[kN];
  int index_;
};

// Box-Muller on 16 uniforms in place, as torch's normal_fill_16 (all float arithmetic;
// theta = float(2*pi) * u2 matches torch's vectorised path, max error 2.4e-7).
void normal_fill_16(float* d) {
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j];
    const float u2 = d[j + 8];
    const float radius = std::sqrt(-2.0f * std::log(u1));
    const float theta = float(2.0 * M_PI) * u2;
    d[j] = radius * std::cos(theta);
    d[j + 8] = radius * std::sin(theta);
  }
}

}  // namespace

void torch_randn(uint64_t seed, float* out, int64_t n) {
  DIT_CHECK(n >= 16, "torch_randn: " << n << " elements requested, but only tensors of >= 16 elements "
                                     "reproduce torch's generator (torch uses another path below 16)");
  MT19937 gen(seed);
  for (int64_t i = 0; i < n; ++i) out[i] = gen.uniform();
  for (int64_t o = 0; o + 16 <= n; o += 16) normal_fill_16(out + o);
  if (n % 16 != 0) {
    for (int64_t i = n - 16; i < n; ++i) out[i] = gen.uniform();
    normal_fill_16(out + n - 16);
  }
}

Tensor torch_randn(uint64_t seed, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::F32);
  torch_randn(seed, t.f32(), t.numel());
  return t;
}

}  // namespace dit
