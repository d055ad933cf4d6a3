#include <catch2/catch.hpp>
#include <cmath>

#include "kernel_test_util.h"
#include "runtime/error.h"
#include "runtime/rms_norm.h"

using namespace dit;

namespace {

// Naive: w * (x / sqrt(mean(x²) + eps)) in double.
std::vector<double> rms_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t rows, int64_t dim,
                            double eps) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t i = 0; i < dim; ++i) sq += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(sq / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = double(w[i]) * (double(x[r * dim + i]) * inv);
  }
  return y;
}

}  // namespace

TEST_CASE("rms_norm matches a naive reference", "[kernels][rmsnorm]") {
  for (int64_t rows : {1, 3, 300})
    for (int64_t dim : {1, 7, 48, 4096}) {
      auto x = kt::randv(rows * dim, uint32_t(rows * 31 + dim), -3.f, 3.f);
      auto w = kt::randv(dim, uint32_t(dim + 5), 0.5f, 1.5f);
      std::vector<float> y(x.size(), 9.f);
      rms_norm(x.data(), w.data(), y.data(), rows, dim, 1e-6f);
      kt::check_close(y.data(), rms_ref(x, w, rows, dim, 1e-6).data(), y.size(), 2e-6, 1e-7,
                      "rms rows " + std::to_string(rows) + " dim " + std::to_string(dim));
      rms_norm(x.data(), w.data(), x.data(), rows, dim, 1e-6f);  // in place
      kt::check_close(x, y, 0, 0, "in place");
    }
}

TEST_CASE("rms_norm: eps dominates tiny inputs, zero rows stay zero", "[kernels][rmsnorm]") {
  std::vector<float> x = {1e-6f, -2e-6f, 3e-6f, 0.f}, w = {1.f, 2.f, 3.f, 4.f}, y(4);
  rms_norm(x.data(), w.data(), y.data(), 1, 4, 1e-2f);
  kt::check_close(y.data(), rms_ref(x, w, 1, 4, 1e-2).data(), 4, 1e-6, 0, "eps");
  std::vector<float> z(8, 0.f), wz(8, 1.f), out(8, 5.f);
  rms_norm(z.data(), wz.data(), out.data(), 1, 8, 1e-6f);
  for (float v : out) CHECK(v == 0.f);
  CHECK_THROWS_AS(rms_norm(z.data(), wz.data(), out.data(), 1, 0, 1e-6f), dit::Error);
}
