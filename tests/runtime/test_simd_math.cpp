// simd::exp_f and the activations built on it, on non-finite inputs: NaN stays NaN,
// -inf gives 0, +inf gives inf, with no undefined behaviour on the way (the UBSan build
// fails these if NaN is converted to int or a negative value is shifted) — and the same
// bits as before for every finite input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "runtime/simd_math.h"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// FNV-1a over the bits of exp_f at 2^20 + 2 points spread over [-110, 110]: the
// polynomial, both clamps and the underflow to 0.
uint64_t exp_f_fingerprint() {
  uint64_t h = 1469598103934665603ull;
  const int n = 1 << 20;
  for (int i = 0; i <= n + 1; ++i) {
    const float x = -110.0f + 220.0f * float(i) / float(n);
    const float y = dit::simd::exp_f(x);
    uint32_t b;
    std::memcpy(&b, &y, 4);
    h = (h ^ b) * 1099511628211ull;
  }
  return h;
}

}  // namespace

TEST_CASE("simd::exp_f on NaN and infinities", "[kernels][nonfinite]") {
  CHECK(std::isnan(dit::simd::exp_f(kNaN)));
  CHECK(std::isnan(dit::simd::exp_f(-kNaN)));
  CHECK(dit::simd::exp_f(-kInf) == 0.0f);
  CHECK(dit::simd::exp_f(kInf) >= 2e38f);  // exp of the clamp (inf or FLT_MAX-ish, by compiler)
  CHECK(dit::simd::exp_f(-1e30f) == 0.0f);
  CHECK(dit::simd::exp_f(0.0f) == 1.0f);
}

TEST_CASE("SiLU and tanh-GELU on NaN and infinities", "[kernels][nonfinite]") {
  CHECK(std::isnan(dit::simd::silu_f(kNaN)));
  CHECK(std::isnan(dit::simd::gelu_tanh_f(kNaN)));
  CHECK(dit::simd::silu_f(kInf) == kInf);  // inf / (1 + 0)
  CHECK(dit::simd::gelu_tanh_f(1e30f) == 1e30f);
}

TEST_CASE("simd::exp_f is unchanged on finite inputs, bit for bit", "[kernels][nonfinite]") {
  // Recorded from the implementation before the NaN fix (GCC -O2/-O0 and clang -O2 agree).
  CHECK(exp_f_fingerprint() == 0xee51031174442580ull);
  CHECK(dit::simd::exp_f(1.0f) == Approx(std::exp(1.0f)).epsilon(1e-6));
}

// simd::exp_short_f (attention's exponential for probabilities stored as bf16) against exp in
// double over [-87, 0] at 2^20 points and at the ends: within 5e-6 relative (its degree-4 fit
// of 2^f is 2.9e-6, log2 e rounded to f32 adds up to 1.2e-6 at -87; bf16 keeps 8 significant
// bits, 2^-9 = 2e-3), every non-zero result a normal
// float, exactly 0 below -87 and for -inf and NaN, and 1 at 0.
TEST_CASE("simd::exp_short_f against exp in double", "[kernels][attention]") {
  using dit::simd::exp_short_f;
  const int n = 1 << 20;
  double worst = 0;
  for (int i = 0; i <= n; ++i) {
    const float x = -87.0f * float(i) / float(n);
    const float y = exp_short_f(x);
    const double e = std::exp(double(x));
    worst = std::max(worst, std::fabs(y - e) / e);
    REQUIRE(std::isnormal(y));
  }
  INFO("worst relative error " << worst);
  CHECK(worst <= 5e-6);
  CHECK(worst >= 1e-7);  // it is the short polynomial, not exp_f
  CHECK(exp_short_f(0.f) == 1.0f);
  CHECK(exp_short_f(-87.0f) > 0.f);
  CHECK(exp_short_f(std::nextafter(-87.0f, -100.f)) == 0.f);
  CHECK(exp_short_f(-1000.f) == 0.f);
  CHECK(exp_short_f(-kInf) == 0.f);
  CHECK(exp_short_f(kNaN) == 0.f);
}

// simd::exp_short_scaled_f(d, ExpShortScale(scale)) = exp(d·scale), the scale folded into log2 e
// (bf16 attention's softmax): exp_short_f's bits at scale 1; at DiT's 1/sqrt(72) and at 4,
// within 1.2e-5 relative of exp in double over the range it keeps (c rounded twice adds up to
// 1e-5 at exp(-87)), exactly 0 below it, 1 at 0.
TEST_CASE("simd::exp_short_scaled_f: exp(d·scale) with the scale folded into log2 e", "[kernels][attention]") {
  using dit::simd::ExpShortScale;
  using dit::simd::exp_short_scaled_f;
  for (int i = 0; i <= 4096; ++i) {
    const float x = -87.0f * float(i) / 4096.f;
    REQUIRE(exp_short_scaled_f(x, ExpShortScale(1.f)) == dit::simd::exp_short_f(x));
  }
  for (const float scale : {0.117851130f, 4.f}) {
    const ExpShortScale k(scale);
    double worst = 0;
    const int n = 1 << 18;
    for (int i = 0; i <= n; ++i) {
      const float d = k.d_min * float(i) / float(n);
      const float y = exp_short_scaled_f(d, k);
      const double e = std::exp(double(d) * scale);
      worst = std::max(worst, std::fabs(y - e) / e);
      REQUIRE(std::isnormal(y));
    }
    INFO("scale " << scale << ": worst relative error " << worst);
    CHECK(worst <= 1.2e-5);
    CHECK(exp_short_scaled_f(0.f, k) == 1.0f);
    CHECK(exp_short_scaled_f(std::nextafter(k.d_min, -1e30f), k) == 0.f);
    CHECK(exp_short_scaled_f(-kInf, k) == 0.f);
    CHECK(exp_short_scaled_f(kNaN, k) == 0.f);
  }
}
