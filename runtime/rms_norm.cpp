#include "runtime/rms_norm.h"

#include <cmath>

#include "runtime/error.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"
#include "runtime/simd_math.h"

namespace dit {

DIT_MULTIVERSION static void rms_row(const float* x, const float* w, float* y, int64_t dim, float eps) {
  double sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < dim; ++i) sq += double(x[i]) * double(x[i]);
  const float var = float(sq / double(dim));
  const float r = 1.f / std::sqrt(var + eps);
#pragma omp simd
  for (int64_t i = 0; i < dim; ++i) y[i] = w[i] * (x[i] * r);
}

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  DIT_CHECK(rows >= 0 && dim > 0, "rms_norm: bad shape [" << rows << ", " << dim << "]");
  profile::Scope prof(profile::Cat::NormElementwise);
  parallel_for(rows, rows * dim > 16384, [&](int64_t r) { rms_row(x + r * dim, w, y + r * dim, dim, eps); });
}

}  // namespace dit
