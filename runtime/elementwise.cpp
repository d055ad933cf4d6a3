#include "runtime/elementwise.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/parallel_for.h"
#include "runtime/simd_math.h"

namespace dit {

namespace {
constexpr int64_t kChunk = 16384;  // elements per OpenMP work item
}

DIT_MULTIVERSION static void silu_chunk(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = simd::silu_f(x[i]);
}
DIT_MULTIVERSION static void gelu_chunk(const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = simd::gelu_tanh_f(x[i]);
}

template <class F>
static void chunked(int64_t n, F f) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, chunks > 1, [&](int64_t c) {
    const int64_t b = c * kChunk;
    f(b, std::min(n, b + kChunk) - b);
  });
}

void silu(const float* x, float* y, int64_t n) {
  chunked(n, [&](int64_t b, int64_t len) { silu_chunk(x + b, y + b, len); });
}

void gelu_tanh(const float* x, float* y, int64_t n) {
  chunked(n, [&](int64_t b, int64_t len) { gelu_chunk(x + b, y + b, len); });
}

void add(const float* a, const float* b, float* y, int64_t n) {
  chunked(n, [&](int64_t s, int64_t len) {
    const float* pa = a + s;
    const float* pb = b + s;
    float* py = y + s;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) py[i] = pa[i] + pb[i];
  });
}

void gated_residual_add(const float* f, const float* gate, float* x, int64_t batch, int64_t rows, int64_t dim) {
  parallel_for(batch * rows, batch * rows * dim > kChunk, [&](int64_t br) {
    const int64_t b = br / rows;
    const float* g = gate + b * dim;
    const float* pf = f + br * dim;
    float* px = x + br * dim;
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) px[i] += g[i] * pf[i];
  });
}

DIT_MULTIVERSION void to_bf16(const float* x, uint16_t* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16_rne(x[i]);
}

void upsample_nearest2x(const float* x, void* y, DType out, int64_t n, int64_t h, int64_t w, int64_t c) {
  const size_t es = dtype_size(out);
  const int64_t out_row = 2 * w * c;  // elements of one output row
  parallel_for(n * h, n * h * w * c > kChunk, [&](int64_t r) {  // input row r -> output rows 2r, 2r + 1
    char* y0 = static_cast<char*>(y) + size_t(2 * r * out_row) * es;
    for (int64_t j = 0; j < w; ++j) {
      const float* px = x + (r * w + j) * c;
      char* py = y0 + size_t(2 * j * c) * es;
      if (out == DType::F32)
        std::copy(px, px + c, reinterpret_cast<float*>(py));
      else
        to_bf16(px, reinterpret_cast<uint16_t*>(py), c);
      std::memcpy(py + size_t(c) * es, py, size_t(c) * es);  // the pixel's right neighbour
    }
    std::memcpy(y0 + size_t(out_row) * es, y0, size_t(out_row) * es);  // the row below
  });
}

}  // namespace dit
