// Internal helpers for the hand-written kernels: a vectorisable expf (Cephes-style
// polynomial, ~2 ulp on [-87, 88], exactly 0 below, NaN for NaN), and the function-multiversioning
// attribute used on hot loops (the project is built for baseline x86-64, the machines
// have AVX-512; GCC's target_clones dispatches at load time).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DIT_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DIT_MULTIVERSION
#endif

namespace dit {
namespace simd {

// exp(x) in float; vectorises under `#pragma omp simd` (no library call).
static inline __attribute__((always_inline)) float exp_f(float x) {
  const float hi = 88.3762626647949f;
  const float lo = -87.3365447504f;
  // Written so that NaN takes the `hi` branch: every lane then converts a finite n to int
  // (no undefined behaviour), and NaN is put back at the end. Finite inputs and ±inf
  // give exactly the bits they gave before.
  float xc = x < hi ? x : hi;
  xc = xc > lo ? xc : lo;
  // n = round(x / ln2) via the 1.5·2^23 trick (exact for |n| < 2^22)
  const float magic = 12582912.f;
  float n = (xc * 1.44269504088896341f + magic) - magic;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = (int32_t(n) + 127) << 23;
  float s = __builtin_bit_cast(float, e);
  float y = p * s;
  y = x < lo ? 0.f : y;
  return x == x ? y : x;  // NaN in, NaN out
}

// exp(x) to 4.1e-6 relative for x in [-87, 0], exactly 0 below -87 (no subnormal results):
// 2^n · q(f) with n = round(x·log2 e), f = x·log2 e - n in [-1/2, 1/2] and q a degree-4
// minimax fit of 2^f (2.9e-6; log2 e rounded to f32 adds the rest). For values stored as
// bf16 (8 significant bits, rounding error up to 2^-9): about half the work of exp_f.
// Attention's probabilities (x = logit - row max <= 0).
constexpr float kExpShortLimit = -87.f;  // exp(-87) = 1.6e-38 > FLT_MIN: every non-zero result is normal
constexpr float kExp2Q[5] = {1.f, 6.931241750717163e-1f, 2.4024099111557007e-1f, 5.590637028217316e-2f,
                             9.582818485796452e-3f};
// exp(d·scale) the same way, with the scale folded into log2 e: n = round(d·c), f = d·c - n
// (one FMA) for c = scale·log2 e rounded to f32, and 0 where d < d_min = -87 / scale. As many
// operations as exp_short_f: bf16 attention's softmax scales its logits here, for nothing
// (runtime/softmax_row.h). c, rounded twice, adds up to about 2·2^-24·|d·c|·ln 2 to the
// relative error: 1e-7 at exp(-1), 1e-5 at exp(-87), against bf16's 2^-9.
// exp_short_f(x) is exp_short_scaled_f(x, ExpShortScale(1)), bit for bit.
struct ExpShortScale {
  float c, d_min;
  explicit ExpShortScale(float scale) : c(scale * 1.44269504088896341f), d_min(kExpShortLimit / scale) {}
};
static inline __attribute__((always_inline)) float exp_short_scaled_f(float d, ExpShortScale k) {
  if (!(d >= k.d_min)) return 0.f;  // also NaN
  // n = round-half-even(d·c) by the 1.5·2^23 trick (exact for |n| < 2^22), as
  // _mm512_roundscale_ps rounds it
  const float magic = 12582912.f;
  const float n = (d * k.c + magic) - magic;
  const float f = __builtin_fmaf(d, k.c, -n);
  float q = kExp2Q[4];
  for (int i = 3; i >= 0; --i) q = __builtin_fmaf(q, f, kExp2Q[i]);
  return __builtin_ldexpf(q, int(n));
}
static inline __attribute__((always_inline)) float exp_short_f(float x) {
  return exp_short_scaled_f(x, ExpShortScale(1.f));
}

static inline __attribute__((always_inline)) float silu_f(float x) { return x / (1.f + exp_f(-x)); }

static inline __attribute__((always_inline)) float gelu_tanh_f(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  float u = k * (x + 0.044715f * x * x * x);
  float t = 1.f - 2.f / (exp_f(2.f * u) + 1.f);  // tanh(u)
  return 0.5f * x * (1.f + t);
}

}  // namespace simd
}  // namespace dit
