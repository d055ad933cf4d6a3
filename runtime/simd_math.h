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

static inline __attribute__((always_inline)) float silu_f(float x) { return x / (1.f + exp_f(-x)); }

static inline __attribute__((always_inline)) float gelu_tanh_f(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  float u = k * (x + 0.044715f * x * x * x);
  float t = 1.f - 2.f / (exp_f(2.f * u) + 1.f);  // tanh(u)
  return 0.5f * x * (1.f + t);
}

}  // namespace simd
}  // namespace dit
