// The online-softmax row kernels (runtime/softmax_row.h), each the CPU can run, against a
// double-precision reference: m' = max(m, max s), p = exp(s - m'), a = exp(m - m'),
// l' = l·a + Σ p (each exp within 1e-6 relative of exp(double) of the float difference). Lengths around the vector widths (8, 16) exercise the tails.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "runtime/error.h"
#include "runtime/softmax_row.h"

using namespace dit;

namespace {

struct State {
  float m, l;
};

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
  const std::pair<SoftmaxRowKernel, const char*> kernels[] = {
      {SoftmaxRowKernel::Generic, "generic"}, {SoftmaxRowKernel::Avx2, "avx2"}, {SoftmaxRowKernel::Avx512, "avx512"}};
  int ran = 0;
  for (auto [k, name] : kernels) {
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
