// attention_to_dense (runtime/attention.h): Q, K or V rows as the block matmuls read them,
// dense [batch, heads, tokens, head_dim] in the compute type, the rows split over the threads.
#include <omp.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define DIT_HAVE_AVX512_ROWS 1
#endif

#include <algorithm>
#include <cstring>

#include "runtime/attention.h"
#include "runtime/attention_impl.h"
#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/parallel_for.h"

namespace dit {

namespace {

// `rows` rows of D floats, src_stride apart, rounded to bf16 (to nearest even: the bits of
// to_bf16) into rows dst_stride apart (D: dense). A call per row through to_bf16 cost about as
// much as the conversion at D = 72 (the vector loop's scalar remainder). The AVX-512 kernel does
// a row in whole vectors of 16, the last one redone from D - 16 (the overlap gets the same bits):
// masked stores to lines not in cache were twice as slow here (Zen 4).
void rows_to_bf16_generic(const float* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride, int64_t rows,
                          int64_t D) {
  for (int64_t r = 0; r < rows; ++r) to_bf16(src + r * src_stride, dst + r * dst_stride, D);
}

#ifdef DIT_HAVE_AVX512_ROWS
// GCC 12's AVX-512 headers warn of their own _mm512_undefined_* placeholders once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // (a GCC-only group: clang warns of it as unknown)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void round16(const float* src, uint16_t* dst) {
  __m512i u = _mm512_castps_si512(_mm512_loadu_ps(src));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  u = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void rows_to_bf16_avx512(const float* src, int64_t src_stride,
                                                                           uint16_t* dst, int64_t dst_stride,
                                                                           int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r, src += src_stride, dst += dst_stride) {
    for (int64_t i = 0; i + 16 <= D; i += 16) round16(src + i, dst + i);
    if (D % 16) round16(src + D - 16, dst + D - 16);
  }
}

// `rows` rows of `bytes` bytes, src_stride bytes apart, copied into rows dst_stride bytes apart,
// in whole 64-byte vectors (the last redone from bytes - 64) where a row has at least 64: a
// memcpy call per 144-byte row (bf16, head_dim 72) was a sixth of bf16 attention's time at 256
// tokens.
__attribute__((target("avx512f"))) void rows_copy_avx512(const char* src, int64_t src_stride, char* dst,
                                                         int64_t dst_stride, int64_t rows, int64_t bytes) {
  for (int64_t r = 0; r < rows; ++r, src += src_stride, dst += dst_stride) {
    for (int64_t i = 0; i + 64 <= bytes; i += 64) _mm512_storeu_si512(dst + i, _mm512_loadu_si512(src + i));
    if (bytes % 64) _mm512_storeu_si512(dst + bytes - 64, _mm512_loadu_si512(src + bytes - 64));
  }
}

#pragma GCC diagnostic pop
#endif

// Rows of D elements of T, src_stride elements apart, into rows dst_stride elements apart.
template <class T>
void rows_copy(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t rows, int64_t D) {
  const int64_t bytes = D * int64_t(sizeof(T));
#ifdef DIT_HAVE_AVX512_ROWS
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512 && bytes >= 64)
    return rows_copy_avx512(reinterpret_cast<const char*>(src), src_stride * int64_t(sizeof(T)),
                            reinterpret_cast<char*>(dst), dst_stride * int64_t(sizeof(T)), rows, bytes);
#endif
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_stride, src + r * src_stride, size_t(bytes));
}

void rows_to_bf16(const float* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride, int64_t rows, int64_t D) {
#ifdef DIT_HAVE_AVX512_ROWS
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl");
  if (avx512 && D >= 16) return rows_to_bf16_avx512(src, src_stride, dst, dst_stride, rows, D);
#endif
  rows_to_bf16_generic(src, src_stride, dst, dst_stride, rows, D);
}

// Calls f(src, at, n) for runs of up to 64 tokens of one (batch, head): src the run's first row
// in x (layout L), at its first element in the dense [batch, heads, Td, R] destination (rows of
// R >= D elements). The runs are shared among the threads; no division per row. The heads are
// the inner loop: one run's rows (each on its own page where rows are [.., 3, H, d], 13.8 KB
// apart for DiT-XL in f32) are read for every head while their pages are in the TLB, rather
// than every page of the tokens walked again for each head.
template <class T, class F>
void for_dense_runs(const T* x, const AttnLayout& L, int64_t batch, int64_t heads, int64_t tokens, int64_t D,
                    int64_t R, int64_t dst_tokens, int64_t dst_first, F&& f) {
  DIT_CHECK(R >= D, "attention_to_dense: destination rows of " << R << " elements for head_dim " << D);
  constexpr int64_t kChunk = 64;
  const int64_t Td = dst_tokens > 0 ? dst_tokens : tokens, chunks = (tokens + kChunk - 1) / kChunk;
  parallel_for(batch * heads * chunks, batch * heads * tokens * D > 16384, [&](int64_t task) {
    const int64_t h = task % heads, bc = task / heads, b = bc / chunks, t0 = bc % chunks * kChunk;
    const int64_t n = std::min(kChunk, tokens - t0), bh = b * heads + h;
    f(x + b * L.batch_stride + h * L.head_stride + t0 * L.token_stride, (bh * Td + dst_first + t0) * R, n);
  });
}

}  // namespace

namespace attention_detail {
void copy_rows_bf16(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride, int64_t rows,
                    int64_t D) {
  rows_copy(src, src_stride, dst, dst_stride, rows, D);
}
}  // namespace attention_detail

void attention_to_dense(const float* x, const AttnLayout& L, int64_t batch, int64_t heads, int64_t tokens,
                        int64_t head_dim, DType compute, void* dst, int64_t dst_tokens, int64_t dst_first,
                        int64_t dst_row) {
  const int64_t D = head_dim, R = dst_row > 0 ? dst_row : D;
  for_dense_runs(x, L, batch, heads, tokens, D, R, dst_tokens, dst_first, [&](const float* src, int64_t at, int64_t n) {
    if (compute == DType::BF16) {
      rows_to_bf16(src, L.token_stride, static_cast<uint16_t*>(dst) + at, R, n, D);
    } else {
      rows_copy(src, L.token_stride, static_cast<float*>(dst) + at, R, n, D);
    }
  });
}

void attention_to_dense(const uint16_t* x, const AttnLayout& L, int64_t batch, int64_t heads, int64_t tokens,
                        int64_t head_dim, uint16_t* dst, int64_t dst_tokens, int64_t dst_first, int64_t dst_row) {
  const int64_t D = head_dim, R = dst_row > 0 ? dst_row : D;
  for_dense_runs(x, L, batch, heads, tokens, D, R, dst_tokens, dst_first,
                 [&](const uint16_t* src, int64_t at, int64_t n) { rows_copy(src, L.token_stride, dst + at, R, n, D); });
}

}  // namespace dit
