#include "runtime/softmax_row.h"

#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/simd_math.h"

namespace dit {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// p[j] = e, as f32 or rounded to bf16 (to nearest even, as f32_to_bf16).
inline void put(float* p, float e) { *p = e; }
inline void put(uint16_t* p, float e) { *p = f32_to_bf16(e); }

// The exponential a kernel uses for its output type, of the difference d = s - m: exp_f(d) for
// f32 probabilities (the logits come scaled), the cheaper exp_short_scaled_f (exp(d·scale),
// 4.1e-6 relative, 0 below exp(-87)) for probabilities stored as bf16.
template <class Out>
inline float exp_for(float d, simd::ExpShortScale k) {
  if constexpr (std::is_same_v<Out, float>)
    return simd::exp_f(d);
  else
    return simd::exp_short_scaled_f(d, k);
}
}  // namespace

// Online-softmax update of one row of a block: s (logits; for bf16 p before the scale) -> p,
// running m/l, alpha. The sum l takes the f32 exponentials whatever type p is stored in. For
// f32 p the logits come scaled and scale is 1 (softmax_row_generic_f32).
template <class Out>
static void softmax_row_generic(const float* s, Out* p, int64_t cols, float scale, float* m, float* l, float* a) {
  const simd::ExpShortScale k(scale);
  float mx = kNegInf;
  for (int64_t j = 0; j < cols; ++j) mx = s[j] > mx ? s[j] : mx;
  const float mnew = std::max(*m, mx);
  float sum = 0.f;
  for (int64_t j = 0; j < cols; ++j) {
    const float e = exp_for<Out>(s[j] - mnew, k);
    put(p + j, e);
    sum += e;
  }
  const float alpha = *m == kNegInf ? 0.f : simd::exp_f((*m - mnew) * scale);
  *l = *l * alpha + sum;
  *m = mnew;
  *a = alpha;
}

#if defined(__GNUC__) && defined(__x86_64__)
#define DIT_HAVE_AVX512_SOFTMAX 1
// GCC 12's _mm512_reduce_* use _mm512_undefined_ps(), which trips -Wuninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // (a GCC-only group: clang warns of it as unknown)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
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

// simd::exp_short_scaled_f on 16 lanes, operation for operation (the same bits): exp(d·scale)
// for c = scale·log2 e and d_min = -87 / scale (simd::ExpShortScale).
__attribute__((target("avx512f"))) static inline __m512 exp512_short(__m512 d, __m512 c, __m512 d_min) {
  const __mmask16 keep = _mm512_cmp_ps_mask(d, d_min, _CMP_GE_OQ);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(d, c), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_fmsub_ps(d, c, n);
  __m512 q = _mm512_set1_ps(simd::kExp2Q[4]);
  for (int i = 3; i >= 0; --i) q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(simd::kExp2Q[i]));
  return _mm512_maskz_scalef_ps(keep, q, n);
}

// The exponential of 16 differences d = s - m for an output type, as exp_for: exp512(d) for
// f32 (scaled logits), exp512_short(d, c, d_min) = exp(d·scale) for bf16.
struct Exp512Args {
  __m512 c, d_min;
};
template <class Out>
__attribute__((target("avx512f"))) static inline __m512 exp512_for(__m512 d, const Exp512Args& k) {
  if constexpr (std::is_same_v<Out, float>)
    return exp512(d);
  else
    return exp512_short(d, k.c, k.d_min);
}
__attribute__((target("avx512f"))) static inline Exp512Args exp512_args(float scale) {
  const simd::ExpShortScale k(scale);
  return {_mm512_set1_ps(k.c), _mm512_set1_ps(k.d_min)};
}

// 16 lanes of p (the first `k` of them): f32 as they are, or bf16 rounded to nearest even with
// integer arithmetic (AVX-512F only: oneDNN computes bf16 on AVX-512 CPUs without the bf16
// instructions too); the same bits as f32_to_bf16 for every non-NaN value.
__attribute__((target("avx512f"))) static inline void store16(float* p, __m512 e, __mmask16 k) {
  _mm512_mask_storeu_ps(p, k, e);
}
__attribute__((target("avx512f"))) static inline void store16(uint16_t* p, __m512 e, __mmask16 k) {
  __m512i u = _mm512_castps_si512(e);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  u = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  _mm512_mask_cvtepi32_storeu_epi16(p, k, _mm512_srli_epi32(u, 16));
}

// The row's new running max: max(m, max_j s[j]).
__attribute__((target("avx512f"))) static inline float row_max16(const float* s, int64_t cols, float m) {
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  __m512 vmax = ninf;
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + j));
  if (j < cols) {
    const __mmask16 k = __mmask16((1u << (cols - j)) - 1);
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(ninf, k, s + j));
  }
  return std::max(m, _mm512_reduce_max_ps(vmax));
}

__attribute__((target("avx512f"))) static inline void finish_row(float mnew, float scale, __m512 vsum, float* m,
                                                                 float* l, float* a) {
  const float alpha = *m == kNegInf ? 0.f : simd::exp_f((*m - mnew) * scale);
  *l = *l * alpha + _mm512_reduce_add_ps(vsum);
  *m = mnew;
  *a = alpha;
}

// As softmax_row_generic, 16 logits at a time (f32 p: scale 1, softmax_row_avx512_f32).
template <class Out>
__attribute__((target("avx512f"))) static void softmax_row_avx512(const float* s, Out* p, int64_t cols, float scale,
                                                                  float* m, float* l, float* a) {
  const float mnew = row_max16(s, cols, *m);
  const __m512 vm = _mm512_set1_ps(mnew);
  const Exp512Args ek = std::is_same_v<Out, float> ? Exp512Args{} : exp512_args(scale);  // f32: unused
  __m512 vsum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    const __m512 e = exp512_for<Out>(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm), ek);
    store16(p + j, e, __mmask16(0xffff));
    vsum = _mm512_add_ps(vsum, e);
  }
  if (j < cols) {
    const __mmask16 k = __mmask16((1u << (cols - j)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(k, exp512_for<Out>(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm), ek));
    store16(p + j, e, k);
    vsum = _mm512_add_ps(vsum, e);
  }
  finish_row(mnew, scale, vsum, m, l, a);
}

// bf16 output with AVX512_BF16's vcvtne2ps2bf16 (32 values rounded to nearest even in one
// instruction, a third cheaper per row than the integer rounding of store16). The instruction
// flushes subnormals, which exp512_short never produces, so p, m, l and a are bit for bit those
// of softmax_row_avx512<uint16_t> (the same exponentials, summed in the same order).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static void softmax_row_avx512bf16(
    const float* s, uint16_t* p, int64_t cols, float scale, float* m, float* l, float* a) {
  const float mnew = row_max16(s, cols, *m);
  const __m512 vm = _mm512_set1_ps(mnew);
  const Exp512Args ek = exp512_args(scale);
  __m512 vsum = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= cols; j += 32) {
    const __m512 e0 = exp512_short(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm), ek.c, ek.d_min);
    const __m512 e1 = exp512_short(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16), vm), ek.c, ek.d_min);
    _mm512_storeu_si512(p + j, __m512i(_mm512_cvtne2ps_pbh(e1, e0)));
    vsum = _mm512_add_ps(vsum, e0);
    vsum = _mm512_add_ps(vsum, e1);
  }
  for (; j < cols; j += 16) {  // at most one full vector, then the masked tail
    const __mmask16 k = cols - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - j)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(k, exp512_short(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), vm), ek.c, ek.d_min));
    _mm256_mask_storeu_epi16(p + j, k, __m256i(_mm512_cvtneps_pbh(e)));
    vsum = _mm512_add_ps(vsum, e);
  }
  finish_row(mnew, scale, vsum, m, l, a);
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

__attribute__((target("avx2,fma"))) static void softmax_row_avx2(const float* s, float* p, int64_t cols, float* m,
                                                         float* l, float* a) {
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
  static const bool avx512bf16 = avx512 && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (k) {
    case SoftmaxRowKernel::Generic:
      return true;
#ifdef DIT_HAVE_AVX512_SOFTMAX
    case SoftmaxRowKernel::Avx2:
      return avx2;
    case SoftmaxRowKernel::Avx512:
      return avx512;
    case SoftmaxRowKernel::Avx512Bf16:
      return avx512bf16;
#endif
    default:
      return false;
  }
}

SoftmaxRowKernel softmax_row_best() {
  static const SoftmaxRowKernel best = [] {
    for (SoftmaxRowKernel k : {SoftmaxRowKernel::Avx512Bf16, SoftmaxRowKernel::Avx512, SoftmaxRowKernel::Avx2})
      if (softmax_row_supported(k)) return k;
    return SoftmaxRowKernel::Generic;
  }();
  return best;
}

namespace {

// The kernels' signatures: f32 probabilities from scaled logits; bf16 probabilities from
// logits before the scale, which the exponential applies.
using RowFn32 = void (*)(const float*, float*, int64_t, float*, float*, float*);
using RowFn16 = void (*)(const float*, uint16_t*, int64_t, float, float*, float*, float*);

// The f32 forms of the kernels shared with bf16 (their logits come scaled: scale 1).
void softmax_row_generic_f32(const float* s, float* p, int64_t cols, float* m, float* l, float* a) {
  softmax_row_generic<float>(s, p, cols, 1.f, m, l, a);
}
#ifdef DIT_HAVE_AVX512_SOFTMAX
__attribute__((target("avx512f"))) void softmax_row_avx512_f32(const float* s, float* p, int64_t cols, float* m,
                                                               float* l, float* a) {
  softmax_row_avx512<float>(s, p, cols, 1.f, m, l, a);
}
#endif

RowFn32 kernel_f32(SoftmaxRowKernel k) {
  DIT_CHECK(softmax_row_supported(k), "softmax row kernel " << int(k) << " is not available on this CPU");
  switch (k) {
#ifdef DIT_HAVE_AVX512_SOFTMAX
    case SoftmaxRowKernel::Avx512Bf16:  // f32 output: no bf16 instruction to use
    case SoftmaxRowKernel::Avx512:
      return softmax_row_avx512_f32;
    case SoftmaxRowKernel::Avx2:
      return softmax_row_avx2;
#endif
    default:
      return softmax_row_generic_f32;
  }
}

RowFn16 kernel_bf16(SoftmaxRowKernel k) {
  DIT_CHECK(softmax_row_supported(k), "softmax row kernel " << int(k) << " is not available on this CPU");
  switch (k) {
#ifdef DIT_HAVE_AVX512_SOFTMAX
    case SoftmaxRowKernel::Avx512Bf16:
      return softmax_row_avx512bf16;
    case SoftmaxRowKernel::Avx512:
      return softmax_row_avx512<uint16_t>;
#endif
    default:
      // oneDNN has no bf16 matmul on AVX2-only CPUs, so bf16 probabilities never run there:
      // the scalar kernel serves that slot.
      return softmax_row_generic<uint16_t>;
  }
}

}  // namespace

void softmax_row_with(SoftmaxRowKernel k, const float* s, float* p, int64_t cols, float* m, float* l, float* a) {
  kernel_f32(k)(s, p, cols, m, l, a);
}

void softmax_row_bf16_with(SoftmaxRowKernel k, const float* s, uint16_t* p, int64_t cols, float scale, float* m,
                           float* l, float* a) {
  kernel_bf16(k)(s, p, cols, scale, m, l, a);
}

void softmax_row(const float* s, float* p, int64_t cols, float* m, float* l, float* a) {
  static const RowFn32 best = kernel_f32(softmax_row_best());
  best(s, p, cols, m, l, a);
}

void softmax_row_bf16(const float* s, uint16_t* p, int64_t cols, float scale, float* m, float* l, float* a) {
  static const RowFn16 best = kernel_bf16(softmax_row_best());
  best(s, p, cols, scale, m, l, a);
}

}  // namespace dit
