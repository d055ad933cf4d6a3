// attention_to_dense (runtime/attention.h): Q, K or V rows into the dense form the attention's
// block matmuls read, element for element against f32_to_bf16 (or the float itself).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>

#include "kernel_test_util.h"
#include "runtime/attention.h"
#include "runtime/dtype.h"

using namespace dit;

TEST_CASE("attention_to_dense: every element as f32_to_bf16 (or the float), any head_dim", "[kernels][attention][dense]") {
  // The bf16 rows are converted in vectors of 16 with the last one redone from D - 16 (and
  // bf16 rows copied in vectors of 32); the tokens in tasks of 64. Head dims below, at and
  // between multiples of 16 and 32, token counts across task boundaries, values that round
  // up, down and to even.
  for (int64_t D : {int64_t(5), int64_t(16), int64_t(24), int64_t(32), int64_t(40), int64_t(72), int64_t(80)})
    for (int64_t T : {int64_t(1), int64_t(130)}) {
      const int64_t B = 2, H = 3, row = 3 * H * D;
      std::vector<float> x = kt::randv(B * T * row, 21, -3.f, 3.f);
      for (size_t i = 0; i < x.size(); i += 7) {  // ties: bit 15 set, bits 0-14 clear, both parities
        uint32_t u;
        std::memcpy(&u, &x[i], 4);
        u = (u & 0xffff0000u) | 0x8000u | (i % 2 ? 0x10000u : 0u);
        std::memcpy(&x[i], &u, 4);
      }
      const AttnLayout L = AttnLayout::bthd(T, D, H, row);
      for (DType c : {DType::F32, DType::BF16}) {
        const size_t esz = c == DType::BF16 ? 2 : 4, n = size_t(B * H * T * D);
        std::vector<char> got(n * esz, char(0x55));
        attention_to_dense(x.data() + H * D, L, B, H, T, D, c, got.data());  // K of the fused buffer
        size_t bad = 0;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t)
              for (int64_t i = 0; i < D; ++i) {
                const float v = x[size_t(b * T * row + t * row + H * D + h * D + i)];
                const size_t at = size_t(((b * H + h) * T + t) * D + i);
                if (c == DType::BF16)
                  bad += reinterpret_cast<const uint16_t*>(got.data())[at] != f32_to_bf16(v);
                else
                  bad += std::memcmp(got.data() + at * 4, &v, 4) != 0;
              }
        INFO(dtype_name(c) << " D " << D << " T " << T);
        CHECK(bad == 0);
      }
      // From bf16 rows (a projection that wrote bf16): a copy, in vectors of 32 with the last
      // redone from D - 32 where D >= 32, into a longer sequence at token 1 with nothing
      // written outside the rows.
      std::vector<uint16_t> x16(x.size());
      for (size_t i = 0; i < x.size(); ++i) x16[i] = f32_to_bf16(x[i]);
      const int64_t Td = T + 2;
      std::vector<uint16_t> got16(size_t(B * H * Td * D), 0x5555);
      attention_to_dense(x16.data() + H * D, L, B, H, T, D, got16.data(), Td, 1);
      size_t bad = 0;
      for (int64_t bh = 0; bh < B * H; ++bh)
        for (int64_t t = 0; t < Td; ++t)
          for (int64_t i = 0; i < D; ++i) {
            const int64_t b = bh / H, h = bh % H;
            const uint16_t g = got16[size_t((bh * Td + t) * D + i)];
            bad += t >= 1 && t <= T ? g != x16[size_t(b * T * row + (t - 1) * row + H * D + h * D + i)] : g != 0x5555;
          }
      INFO("bf16 rows, D " << D << " T " << T);
      CHECK(bad == 0);
    }
}

namespace {

// The elements of `got`, [B·H, T, R] rows, that are not K's row of the fused [B, T, 3, H, D]
// buffer src in their first D elements, or not `fill` after them.
template <class E>
size_t misplaced(const std::vector<E>& got, const std::vector<E>& src, int64_t H, int64_t T, int64_t D, int64_t R,
                 E fill) {
  const int64_t row = 3 * H * D, BH = int64_t(got.size()) / (T * R);
  size_t bad = 0;
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < R; ++i) {
        const int64_t b = bh / H, h = bh % H;
        const E g = got[size_t((bh * T + t) * R + i)];
        bad += i < D ? g != src[size_t(b * T * row + t * row + H * D + h * D + i)] : g != fill;
      }
  return bad;
}

}  // namespace

TEST_CASE("attention_to_dense into longer rows writes each row's head_dim and nothing else", "[kernels][attention][dense]") {
  // dst_row > head_dim: the zero-padded Q and K of AttentionSpec::bf16_pad_qk. All three forms
  // (f32 rows as f32 and as bf16, bf16 rows), head dims below and above the vector widths.
  for (int64_t D : {int64_t(5), int64_t(40), int64_t(72)}) {
    const int64_t B = 2, H = 3, T = 70, R = (D + 31) / 32 * 32 + 8;
    const std::vector<float> x = kt::randv(B * T * 3 * H * D, 23, -3.f, 3.f);
    std::vector<uint16_t> x16(x.size());
    for (size_t i = 0; i < x.size(); ++i) x16[i] = f32_to_bf16(x[i]);
    const AttnLayout L = AttnLayout::bthd(T, D, H, 3 * H * D);
    INFO("D " << D);
    std::vector<uint16_t> got16(size_t(B * H * T * R), 0x5555);
    attention_to_dense(x.data() + H * D, L, B, H, T, D, DType::BF16, got16.data(), 0, 0, R);
    CHECK(misplaced(got16, x16, H, T, D, R, uint16_t(0x5555)) == 0);
    std::fill(got16.begin(), got16.end(), uint16_t(0x5555));
    attention_to_dense(x16.data() + H * D, L, B, H, T, D, got16.data(), 0, 0, R);
    CHECK(misplaced(got16, x16, H, T, D, R, uint16_t(0x5555)) == 0);
    std::vector<float> got(size_t(B * H * T * R), 7.f);
    attention_to_dense(x.data() + H * D, L, B, H, T, D, DType::F32, got.data(), 0, 0, R);
    CHECK(misplaced(got, x, H, T, D, R, 7.f) == 0);
  }
  // Rows shorter than head_dim would overlap: refused.
  std::vector<float> x(64), got(64);
  CHECK_THROWS_WITH(attention_to_dense(x.data(), AttnLayout::bhtd(1, 4, 16), 1, 1, 4, 16, DType::F32, got.data(), 0, 0, 8),
                    Catch::Contains("destination rows of 8 elements for head_dim 16"));
}
