// The online-softmax row kernels (runtime/softmax_row.h), each the CPU can run, against a
// double-precision reference: m' = max(m, max s), p = exp(s - m'), a = exp(m - m'),
// l' = l·a + Σ p (each exp within 1e-6 relative of exp(double) of the float difference). Lengths around the vector widths (8, 16) exercise the tails.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/simd_math.h"
#include "runtime/softmax_row.h"

using namespace dit;

namespace {

struct State {
  float m, l;
};

const std::pair<SoftmaxRowKernel, const char*> kKernels[] = {{SoftmaxRowKernel::Generic, "generic"},
                                                             {SoftmaxRowKernel::Avx2, "avx2"},
                                                             {SoftmaxRowKernel::Avx512, "avx512"},
                                                             {SoftmaxRowKernel::Avx512Bf16, "avx512bf16"}};

void check_kernel(SoftmaxRowKernel k, const char* name) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t cols : {1, 7, 8, 9, 15, 16, 17, 31, 64, 100, 513})
    for (const State st : {State{ninf, 0.f}, State{2.f, 5.f}, State{40.f, 1.f}, State{-40.f, 3.f}})
      for (bool in_place : {false, true}) {
        std::vector<float> s(static_cast<size_t>(cols)), p(static_cast<size_t>(cols), NAN);
        for (float& x : s) x = nd(rng);
        if (cols > 3) s[2] = -FLT_MAX;  // a masked key
        const std::vector<float> s0 = s;
        float m = st.m, l = st.l, a = NAN;
        softmax_row_with(k, s.data(), in_place ? s.data() : p.data(), cols, &m, &l, &a);
        const std::vector<float>& got = in_place ? s : p;
        // reference in double
        double mx = st.m;
        for (float x : s0) mx = std::max(mx, double(x));
        // The kernels subtract in float (as the caller's logits are float): the reference takes
        // the same rounded differences and exponentiates them in double.
        const double ar = st.m == ninf ? 0.0 : std::exp(double(st.m - float(mx)));
        double sum = 0;
        INFO(name << " cols " << cols << " m " << st.m << " l " << st.l << (in_place ? " in place" : ""));
        for (int64_t j = 0; j < cols; ++j) {
          const double e = std::exp(double(s0[size_t(j)] - float(mx)));
          sum += e;
          CHECK(std::fabs(got[size_t(j)] - e) <= 1e-6 * e + 1e-38);
        }
        CHECK(m == float(mx));
        CHECK(std::fabs(a - ar) <= 1e-6 * ar + 1e-38);
        const double lr = double(st.l) * ar + sum;
        CHECK(std::fabs(l - lr) <= 1e-6 * lr);
      }
}

}  // namespace

TEST_CASE("softmax row kernels equal a double-precision reference", "[runtime][attention]") {
  int ran = 0;
  for (auto [k, name] : kKernels) {
    if (!softmax_row_supported(k)) {
      WARN("softmax row kernel " << name << " not checked: this CPU cannot run it");
      CHECK_THROWS_AS(softmax_row_with(k, nullptr, nullptr, 0, nullptr, nullptr, nullptr), Error);
      continue;
    }
    check_kernel(k, name);
    ++ran;
  }
  CHECK(ran >= 1);
  CHECK(softmax_row_supported(softmax_row_best()));
}

// The bf16 variant (one pass: exponentials stored rounded to bf16), for each kernel the CPU runs:
// - each p is simd::exp_short_f's value rounded to nearest even, bit for bit. Over about
//   a million logits some values fall exactly halfway between two bf16 values (low 16 bits
//   0x8000), so ties to even are checked too;
// - against a double-precision reference: p within 2^-8 relative (rounding to 8 significant bits
//   plus the short polynomial), 0 where (s - m')·scale < -87; m' exact, a within 1e-6; l within
//   5e-5 of the double sum (4096 f32 additions);
// - at scale 1, against the f32 kernel (summed in the same order): m' and a exact, l within 1e-5;
// - the scale is taken before the exponential (the logits come unscaled): at 1/sqrt(72) each p
//   is simd::exp_short_scaled_f's value, and its m' the unscaled max;
// - the AVX512_BF16 kernel (conversion instruction) gives the AVX-512 kernel's bits: p and l.
TEST_CASE("softmax row kernels store bf16 probabilities rounded to nearest even",
          "[runtime][attention][bf16]") {
  const float ninf = -std::numeric_limits<float>::infinity();
  int ran = 0;
  for (auto [k, name] : kKernels) {
    if (!softmax_row_supported(k)) {
      WARN("softmax row kernel " << name << " (bf16 output) not checked: this CPU cannot run it");
      CHECK_THROWS_AS(softmax_row_bf16_with(k, nullptr, nullptr, 0, 1.f, nullptr, nullptr, nullptr), Error);
      continue;
    }
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.f, 4.f);
    int64_t ties = 0, values = 0, zeros = 0;
    for (int64_t cols : {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 513, 4096})
      for (int rep = 0; rep < (cols == 4096 ? 256 : 4); ++rep) {
        std::vector<float> s(static_cast<size_t>(cols)), p32(s.size());
        std::vector<uint16_t> p16(s.size(), 0xffff);
        for (float& x : s) x = nd(rng);
        if (cols > 3) s[2] = -FLT_MAX;  // a masked key
        const State st = rep % 2 ? State{ninf, 0.f} : State{3.f, 2.f};
        const float scale = rep % 4 < 2 ? 1.f : 0.117851130f;  // DiT's 1/sqrt(72)
        if (cols > 5) s[4] = s[0] - 95.f / scale;  // below exp(-87) of the row's max at most
        float m32 = st.m, l32 = st.l, a32 = NAN, m16 = st.m, l16 = st.l, a16 = NAN;
        // The f32 kernel with the same summation order: the scalar one where bf16 output on
        // AVX2 is served by it.
        const SoftmaxRowKernel same = k == SoftmaxRowKernel::Avx2 ? SoftmaxRowKernel::Generic : k;
        softmax_row_with(same, s.data(), p32.data(), cols, &m32, &l32, &a32);
        softmax_row_bf16_with(k, s.data(), p16.data(), cols, scale, &m16, &l16, &a16);
        INFO(name << " cols " << cols << " rep " << rep << " scale " << scale);
        REQUIRE(m16 == m32);  // the unscaled max either way
        const double ar = st.m == ninf ? 0.0 : std::exp(double((st.m - m16) * scale));
        CHECK(std::fabs(a16 - ar) <= 1e-6 * ar);
        if (scale == 1.f) CHECK(a16 == a32);
        int64_t not_rounded = 0, far = 0;
        double sum = 0;
        for (size_t j = 0; j < s.size(); ++j) {
          const float d = s[j] - m16;
          const float before = simd::exp_short_scaled_f(d, simd::ExpShortScale(scale));
          uint32_t u;
          std::memcpy(&u, &before, 4);
          ties += (u & 0xffffu) == 0x8000u;
          not_rounded += p16[j] != f32_to_bf16(before);
          const double x = double(d) * scale, e = std::exp(x), got = bf16_to_f32(p16[j]);
          sum += e;
          if (x < -87.0) {  // exp_short_scaled_f: exactly 0
            far += got != 0;
            ++zeros;
          } else {
            far += std::fabs(got - e) > 0x1p-8 * e;
          }
        }
        values += cols;
        CHECK(not_rounded == 0);
        CHECK(far == 0);
        // l: the f32 kernel's sum of the same kind (same order) up to the exponentials' error,
        // and the double reference up to that and f32 summation over `cols` terms.
        const double lr = double(st.l) * ar + sum;
        if (scale == 1.f) CHECK(std::fabs(l16 - l32) <= 1e-5 * l32);
        CHECK(std::fabs(l16 - lr) <= 5e-5 * lr);
        if (k == SoftmaxRowKernel::Avx512Bf16) {  // the same bits as the integer rounding of AVX-512
          std::vector<uint16_t> q16(s.size());
          float m = st.m, l = st.l, a = NAN;
          softmax_row_bf16_with(SoftmaxRowKernel::Avx512, s.data(), q16.data(), cols, scale, &m, &l, &a);
          CHECK(q16 == p16);
          CHECK(l == l16);
        }
      }
    INFO(name << ": " << ties << " exact ties among " << values << " probabilities, " << zeros << " below exp(-87)");
    CHECK(ties >= 3);
    CHECK(zeros > 100);
    ++ran;
  }
  CHECK(ran >= 1);
}

// The bf16 kernels take the difference before the scale: a row of equal logits, the masked keys'
// -FLT_MAX included, gives exactly exp(0) = 1 each (and l = cols), at any scale. (Folding the
// scale into the difference with one FMA, (s·scale - m'), leaves the rounding error of
// -FLT_MAX·scale, about 1e31, in the argument: every p was 0 and l too.)
TEST_CASE("softmax row kernels, bf16: equal logits give exp(0) at any scale, -FLT_MAX included",
          "[runtime][attention][bf16]") {
  for (auto [k, name] : kKernels) {
    if (!softmax_row_supported(k)) continue;
    for (const float v : {0.f, 3.5f, -1e30f, -FLT_MAX})
      for (const float scale : {1.f, 0.117851130f, 0.35355339f, 4.f}) {
        std::vector<float> s(37, v);
        std::vector<uint16_t> p(s.size());
        float m = -std::numeric_limits<float>::infinity(), l = 0.f, a = NAN;
        softmax_row_bf16_with(k, s.data(), p.data(), int64_t(s.size()), scale, &m, &l, &a);
        INFO(name << " logit " << v << " scale " << scale);
        CHECK(m == v);
        CHECK(l == 37.f);
        CHECK(a == 0.f);
        for (uint16_t x : p) CHECK(x == f32_to_bf16(1.f));
      }
  }
}
