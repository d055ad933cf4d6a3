// Helpers shared by the kernel tests: fixed-seed random data and a tolerance check that
// reports the worst element.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace kt {

inline std::vector<float> randv(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Every got and want finite and |got - want| <= atol + rtol·|want|; on failure names the
// worst index.
template <class W>
inline void check_close(const float* got, const W* want, size_t n, double rtol, double atol,
                        const std::string& what = "") {
  size_t worst = 0;
  double worst_excess = -1;
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    double g = got[i], w = double(want[i]);
    double err = std::fabs(g - w), tol = atol + rtol * std::fabs(w);
    // NaN fails the comparison; Inf in got or want fails explicitly (an infinite want
    // would otherwise give an infinite tolerance).
    const bool finite = std::isfinite(g) && std::isfinite(w);
    if (!finite || !(err <= tol)) ok = false;
    double excess = (!finite || std::isnan(err)) ? 1e300 : err - tol;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  std::ostringstream os;
  if (n) os << what << " worst at " << worst << ": got " << got[worst] << " want " << double(want[worst]);
  INFO(os.str());
  CHECK(ok);
}

template <class W>
inline void check_close(const std::vector<float>& got, const std::vector<W>& want, double rtol, double atol,
                        const std::string& what = "") {
  REQUIRE(got.size() == want.size());
  check_close(got.data(), want.data(), got.size(), rtol, atol, what);
}

inline double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double silu_ref(double x) { return x / (1 + std::exp(-x)); }

}  // namespace kt
