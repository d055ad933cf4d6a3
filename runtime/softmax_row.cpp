#include "runtime/softmax_row.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "runtime/error.h"
#include "runtime/simd_math.h"

namespace dit {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

// Online-softmax update of one row of a block: s (logits, already scaled) -> p, running m/l, alpha.
static void softmax_row_generic(const float* s, float* p, int64_t cols, float* m, float* l, float* a) {
  float mx = kNegInf;
  for (int64_t j = 0; j < cols; ++j) mx = s[j] > mx ? s[j] : mx;
  const float mnew = std::max(*m, mx);
  float sum = 0.f;
  for (int64_t j = 0; j < cols; ++j) {
    float e = simd::exp_f(s[j] - mnew);
    p[j] = e;
    sum += e;
  }
  const float alpha = *m == kNegInf ? 0.f : simd::exp_f(*m - mnew);
  *l = *l * alpha + sum;
  *m = mnew;
  *a = alpha;
}

#if defined(__GNUC__) && defined(__x86_64__)
#define DIT_HAVE_AVX512_SOFTMAX 1
// GCC 12's _mm512_reduce_* use _mm512_undefined_ps(), which trips -Wuninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) static inline __m512 exp512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3365447504f);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.3762626647949f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_maskz_mov_ps(~under, _mm512_scalef_ps(p, n));
}

__attribute__((target("avx512f"))) static void softmax_row_avx512(const float* s, float* p, int64_t cols, float* m, float* l,
                                                           float* a) {
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  __m512 vmax = ninf;
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  if (j < cols) {
    const __mmask16 k = __mmask16((1u << (cols - j)) - 1);
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(ninf, k, s + j));
  }
  const float mnew = std::max(*m, _mm512_reduce_max_ps(vmax));
  const __m512 vm = _mm512_set1_ps(mnew);
  __m512 vsum = _mm512_setzero_ps();
  for (j = 0; j + 16 <= cols; j += 16) {
    __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm));
    _mm512_storeu_ps(p + j, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (j < cols) {
    const __mmask16 k = __mmask16((1u << (cols - j)) - 1);
    __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm));
    _mm512_mask_storeu_ps(p + j, k, e);
    vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(k, e));
  }
  const float alpha = *m == kNegInf ? 0.f : simd::exp_f(*m - mnew);
  *l = *l * alpha + _mm512_reduce_add_ps(vsum);
  *m = mnew;
  *a = alpha;
}

// The same for AVX2 + FMA CPUs (no AVX-512): GCC leaves the generic exp loop scalar, which was
// 61% of the attention time on an AVX2 EPYC (perf, dit-kernel-bench --only attention).
// The polynomial of simd::exp_f; 2^n built in the exponent bits (n in [-126, 128] after the clamp).
__attribute__((target("avx2,fma"))) static inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3365447504f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3762626647949f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

__attribute__((target("avx2,fma"))) static void softmax_row_avx2(const float* s, float* p, int64_t cols, float* m, float* l,
                                                         float* a) {
  __m256 vmax = _mm256_set1_ps(kNegInf);
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  float lanes[8];
  _mm256_storeu_ps(lanes, vmax);
  float mx = kNegInf;
  for (float v : lanes) mx = v > mx ? v : mx;
  for (int64_t t = j; t < cols; ++t) mx = s[t] > mx ? s[t] : mx;
  const float mnew = std::max(*m, mx);
  const __m256 vm = _mm256_set1_ps(mnew);
  __m256 vsum = _mm256_setzero_ps();
  for (j = 0; j + 8 <= cols; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
    _mm256_storeu_ps(p + j, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  _mm256_storeu_ps(lanes, vsum);
  float sum = 0.f;
  for (float v : lanes) sum += v;
  for (; j < cols; ++j) {
    const float e = simd::exp_f(s[j] - mnew);
    p[j] = e;
    sum += e;
  }
  const float alpha = *m == kNegInf ? 0.f : simd::exp_f(*m - mnew);
  *l = *l * alpha + sum;
  *m = mnew;
  *a = alpha;
}

#pragma GCC diagnostic pop
#endif

bool softmax_row_supported(SoftmaxRowKernel k) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (k) {
    case SoftmaxRowKernel::Generic:
      return true;
#ifdef DIT_HAVE_AVX512_SOFTMAX
    case SoftmaxRowKernel::Avx2:
      return avx2;
    case SoftmaxRowKernel::Avx512:
      return avx512;
#endif
    default:
      return false;
  }
}

void softmax_row_with(SoftmaxRowKernel k, const float* s, float* p, int64_t cols, float* m, float* l, float* a) {
  DIT_CHECK(softmax_row_supported(k), "softmax row kernel " << int(k) << " is not available on this CPU");
  switch (k) {
#ifdef DIT_HAVE_AVX512_SOFTMAX
    case SoftmaxRowKernel::Avx512:
      return softmax_row_avx512(s, p, cols, m, l, a);
    case SoftmaxRowKernel::Avx2:
      return softmax_row_avx2(s, p, cols, m, l, a);
#endif
    default:
      return softmax_row_generic(s, p, cols, m, l, a);
  }
}

void softmax_row(const float* s, float* p, int64_t cols, float* m, float* l, float* a) {
  using Fn = void (*)(const float*, float*, int64_t, float*, float*, float*);
  static const Fn best = [] {
    switch (softmax_row_best()) {
#ifdef DIT_HAVE_AVX512_SOFTMAX
      case SoftmaxRowKernel::Avx512:
        return Fn(softmax_row_avx512);
      case SoftmaxRowKernel::Avx2:
        return Fn(softmax_row_avx2);
#endif
      default:
        return Fn(softmax_row_generic);
    }
  }();
  best(s, p, cols, m, l, a);
}

SoftmaxRowKernel softmax_row_best() {
  static const SoftmaxRowKernel best = softmax_row_supported(SoftmaxRowKernel::Avx512) ? SoftmaxRowKernel::Avx512
                                       : softmax_row_supported(SoftmaxRowKernel::Avx2) ? SoftmaxRowKernel::Avx2
                                                                                         : SoftmaxRowKernel::Generic;
  return best;
}


}  // namespace dit
