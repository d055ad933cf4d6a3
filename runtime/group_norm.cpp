#include "runtime/group_norm.h"

#include <cmath>
#include <vector>

#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/parallel_for.h"
#include "runtime/row_split.h"
#include "runtime/simd_math.h"

namespace dit {

namespace {

constexpr int64_t kPixels = 256;  // pixels per chunk of the sums (fixed: thread-count independent)

// acc[c] += x[c] over one pixel's channels.
DIT_MULTIVERSION void add_row(const float* x, double* acc, int64_t C) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) acc[c] += double(x[c]);
}

// acc[c] += (x[c] - mean[c])² over one pixel's channels.
DIT_MULTIVERSION void add_sq_row(const float* x, const float* mean, double* acc, int64_t C) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) {
    const double d = double(x[c] - mean[c]);
    acc[c] += d * d;
  }
}

// y[c] = (x[c] - mean[c])·a[c] + b[c] (then SiLU), f32 out.
DIT_MULTIVERSION void apply_row(const float* x, const float* mean, const float* a, const float* b, float* y,
                                int64_t C, bool silu) {
  if (silu) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = simd::silu_f((x[c] - mean[c]) * a[c] + b[c]);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] - mean[c]) * a[c] + b[c];
  }
}

// Per-channel sums over the chunks of one image: part[k][c] = Σ over chunk k's pixels of f(pixel, c).
template <class RowFn>
void chunk_sums(int64_t HW, int64_t C, std::vector<double>& part, RowFn row) {
  const int64_t chunks = (HW + kPixels - 1) / kPixels;
  part.assign(size_t(chunks * C), 0.0);
  parallel_for(chunks, chunks > 1, [&](int64_t k) {
    double* acc = part.data() + k * C;
    for (int64_t p = k * kPixels, end = std::min(HW, p + kPixels); p < end; ++p) row(p, acc);
  });
}

// Every group's total of part[k][c] over its channels, chunks in order; added over the bands
// of the image when it is split.
void group_totals(const std::vector<double>& part, int64_t C, int64_t cpg, RowSplit* split, std::vector<double>& t) {
  const int64_t G = C / cpg;
  t.assign(size_t(G), 0.0);
  for (int64_t g = 0; g < G; ++g)
    for (size_t k = 0; k < part.size() / size_t(C); ++k)
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) t[size_t(g)] += part[k * size_t(C) + size_t(c)];
  if (split) split->sum(t.data(), G);
}

}  // namespace

void group_norm(const GroupNormSpec& s, const float* x, void* y, const float* gamma, const float* beta) {
  DIT_CHECK(s.batch > 0 && s.channels > 0 && s.height > 0 && s.width > 0 && s.groups > 0 &&
                s.channels % s.groups == 0,
            "group_norm: bad shape [" << s.batch << ", " << s.height << ", " << s.width << ", " << s.channels
                                      << "] with " << s.groups << " groups");
  DIT_CHECK(s.out == DType::F32 || x != y, "group_norm: bf16 output cannot overwrite its f32 input");
  DIT_CHECK(!s.split || (s.batch == 1 && s.image_height >= s.height), "group_norm: a band needs batch 1 and its image's height");
  const int64_t C = s.channels, HW = s.height * s.width, cpg = C / s.groups;
  const double count = double(s.split ? s.image_height * s.width : HW) * double(cpg);
  std::vector<double> part, total;
  std::vector<float> mean(static_cast<size_t>(C)), a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* xn = x + n * HW * C;
    // mean[c]: the mean of c's group, per channel so that the loops run over channels.
    chunk_sums(HW, C, part, [&](int64_t p, double* acc) { add_row(xn + p * C, acc, C); });
    group_totals(part, C, cpg, s.split, total);
    for (int64_t g = 0; g < s.groups; ++g) {
      const float m = float(total[size_t(g)] / count);
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) mean[size_t(c)] = m;
    }
    chunk_sums(HW, C, part, [&](int64_t p, double* acc) { add_sq_row(xn + p * C, mean.data(), acc, C); });
    group_totals(part, C, cpg, s.split, total);
    for (int64_t g = 0; g < s.groups; ++g) {
      const double rstd = 1.0 / std::sqrt(total[size_t(g)] / count + double(s.eps));
      for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) {
        a[size_t(c)] = float((gamma ? gamma[c] : 1.0) * rstd);
        b[size_t(c)] = beta ? beta[c] : 0.f;
      }
    }
    const int64_t chunks = (HW + kPixels - 1) / kPixels;
    parallel_for(chunks, chunks > 1, [&](int64_t k) {
      float row[1024];  // bf16 output: one pixel in f32, then rounded
      for (int64_t p = k * kPixels, end = std::min(HW, p + kPixels); p < end; ++p) {
        const int64_t at = (n * HW + p) * C;
        if (s.out == DType::F32) {
          apply_row(xn + p * C, mean.data(), a.data(), b.data(), static_cast<float*>(y) + at, C, s.silu);
          continue;
        }
        for (int64_t c0 = 0; c0 < C; c0 += 1024) {  // channels in pieces of the stack row
          const int64_t w = std::min<int64_t>(1024, C - c0);
          apply_row(xn + p * C + c0, mean.data() + c0, a.data() + c0, b.data() + c0, row, w, s.silu);
          to_bf16(row, static_cast<uint16_t*>(y) + at + c0, w);
        }
      }
    });
  }
}

}  // namespace dit
