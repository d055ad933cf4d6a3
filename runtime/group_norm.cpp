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

namespace {

void check_spec(const GroupNormSpec& s) {
  DIT_CHECK(s.batch > 0 && s.channels > 0 && s.height > 0 && s.width > 0 && s.groups > 0 &&
                s.channels % s.groups == 0,
            "group_norm: bad shape [" << s.batch << ", " << s.height << ", " << s.width << ", " << s.channels
                                      << "] with " << s.groups << " groups");
  DIT_CHECK(!s.split || (s.batch == 1 && s.image_height >= s.height), "group_norm: a band needs batch 1 and its image's height");
}

// One image's statistics (xn: [height, width, channels]) into f, the sums' scratch in part/total.
void image_stats(const GroupNormSpec& s, const float* xn, const float* gamma, const float* beta, GroupNormAffine& f,
                 std::vector<double>& part, std::vector<double>& total) {
  const int64_t C = s.channels, HW = s.height * s.width, cpg = C / s.groups;
  const double count = double(s.split ? s.image_height * s.width : HW) * double(cpg);
  f.mean.resize(size_t(C));
  f.a.resize(size_t(C));
  f.b.resize(size_t(C));
  // mean[c]: the mean of c's group, per channel so that the loops run over channels.
  chunk_sums(HW, C, part, [&](int64_t p, double* acc) { add_row(xn + p * C, acc, C); });
  group_totals(part, C, cpg, s.split, total);
  for (int64_t g = 0; g < s.groups; ++g) {
    const float m = float(total[size_t(g)] / count);
    for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) f.mean[size_t(c)] = m;
  }
  chunk_sums(HW, C, part, [&](int64_t p, double* acc) { add_sq_row(xn + p * C, f.mean.data(), acc, C); });
  group_totals(part, C, cpg, s.split, total);
  for (int64_t g = 0; g < s.groups; ++g) {
    const double rstd = 1.0 / std::sqrt(total[size_t(g)] / count + double(s.eps));
    for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) {
      f.a[size_t(c)] = float((gamma ? gamma[c] : 1.0) * rstd);
      f.b[size_t(c)] = beta ? beta[c] : 0.f;
    }
  }
}

}  // namespace

void group_norm_stats(const GroupNormSpec& s, const float* x, const float* gamma, const float* beta, GroupNormAffine& f) {
  check_spec(s);
  DIT_CHECK(s.batch == 1, "group_norm_stats: one image at a time (batch " << s.batch << ")");
  std::vector<double> part, total;
  image_stats(s, x, gamma, beta, f, part, total);
}

void group_norm_apply(const GroupNormSpec& s, const GroupNormAffine& f, const float* x, float* y, int64_t pixels) {
  const int64_t C = s.channels;
  DIT_CHECK(f.mean.size() == size_t(C), "group_norm_apply: statistics of " << f.mean.size() << " channels, not " << C);
  for (int64_t p = 0; p < pixels; ++p) apply_row(x + p * C, f.mean.data(), f.a.data(), f.b.data(), y + p * C, C, s.silu);
}

void group_norm(const GroupNormSpec& s, const float* x, void* y, const float* gamma, const float* beta) {
  check_spec(s);
  DIT_CHECK(s.out == DType::F32 || x != y, "group_norm: bf16 output cannot overwrite its f32 input");
  const int64_t C = s.channels, HW = s.height * s.width;
  std::vector<double> part, total;
  GroupNormAffine f;
  for (int64_t n = 0; n < s.batch; ++n) {
    const float* xn = x + n * HW * C;
    image_stats(s, xn, gamma, beta, f, part, total);
    const float *mean = f.mean.data(), *a = f.a.data(), *b = f.b.data();
    const int64_t chunks = (HW + kPixels - 1) / kPixels;
    parallel_for(chunks, chunks > 1, [&](int64_t k) {
      float row[1024];  // bf16 output: one pixel in f32, then rounded
      for (int64_t p = k * kPixels, end = std::min(HW, p + kPixels); p < end; ++p) {
        const int64_t at = (n * HW + p) * C;
        if (s.out == DType::F32) {
          apply_row(xn + p * C, mean, a, b, static_cast<float*>(y) + at, C, s.silu);
          continue;
        }
        for (int64_t c0 = 0; c0 < C; c0 += 1024) {  // channels in pieces of the stack row
          const int64_t w = std::min<int64_t>(1024, C - c0);
          apply_row(xn + p * C + c0, mean + c0, a + c0, b + c0, row, w, s.silu);
          to_bf16(row, static_cast<uint16_t*>(y) + at + c0, w);
        }
      }
    });
  }
}

}  // namespace dit
