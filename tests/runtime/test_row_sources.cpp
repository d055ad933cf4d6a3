// Row sources (runtime/row_sources.h): a band's rows normalised or upsampled as a convolution's
// pieces read them. Their rows are group_norm's and upsample_nearest2x's, bit for bit, a halo row
// at the image's edge is zeros and one inside it its neighbour's row transformed; and a Winograd
// convolution over them (Conv2d::run_rows, pieces of rows and a tail piece, with and without the
// residual) gives the bits of the same convolution over the rows made first in a buffer.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "runtime/conv2d.h"
#include "runtime/elementwise.h"
#include "runtime/group_norm.h"
#include "runtime/engine.h"
#include "runtime/row_sources.h"

using namespace dit;

namespace row_sources_test {

constexpr int64_t R = 9, W = 7, C = 32;  // a band of R rows, halo rows above and below

GroupNormSpec gn_spec() {
  GroupNormSpec s;
  s.channels = C;
  s.height = R;
  s.width = W;
  s.groups = 8;
  s.silu = true;
  return s;
}

// All rows of a source, [rows, width, C].
std::vector<float> all_rows(const RowSource& src, int64_t rows, int64_t width) {
  std::vector<float> out(size_t(rows * width * C), -7.f);
  src.rows(0, rows, out.data());
  return out;
}

bool zeros(const float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (p[i] != 0.f) return false;
  return true;
}

}  // namespace row_sources_test

using namespace row_sources_test;

TEST_CASE("row sources: group_norm's and upsample_nearest2x's rows, zeros at the image's edges, neighbours inside",
          "[kernels][conv2d][rows]") {
  const std::vector<float> x = kt::randv(size_t((R + 2) * W * C), 11, -2.f, 3.f);  // halo rows: a neighbour's
  const int64_t row = W * C;
  const GroupNormSpec s = gn_spec();
  std::vector<float> gn(size_t(R * row));
  Tensor gamma = Tensor::empty({C}), beta = Tensor::empty({C});
  const std::vector<float> g = kt::randv(size_t(C), 12), b = kt::randv(size_t(C), 13);
  std::copy(g.begin(), g.end(), gamma.f32());
  std::copy(b.begin(), b.end(), beta.f32());
  group_norm(s, x.data() + row, gn.data(), gamma.f32(), beta.f32());
  GroupNormAffine f;
  group_norm_stats(s, x.data() + row, gamma.f32(), beta.f32(), f);
  std::vector<float> up(size_t(4 * R * row));
  upsample_nearest2x(x.data() + row, up.data(), DType::F32, 1, R, W, C);
  for (const bool top : {false, true})
    for (const bool bottom : {false, true}) {
      INFO("top edge " << top << ", bottom edge " << bottom);
      const std::vector<float> n = all_rows(GroupNormRows(s, f, x.data(), top, bottom), R + 2, W);
      CHECK(std::memcmp(n.data() + row, gn.data(), gn.size() * 4) == 0);
      for (const int64_t h : {int64_t(0), R + 1}) {  // the halo rows
        const bool edge = h == 0 ? top : bottom;
        if (edge) {
          CHECK(zeros(n.data() + h * row, row));
          continue;
        }
        for (int64_t i = 0; i < row; ++i) {  // SiLU((x - mean)·a + b) of the neighbour's row
          const int64_t c = i % C;
          const double v = (double(x[size_t(h * row + i)]) - f.mean[size_t(c)]) * f.a[size_t(c)] + f.b[size_t(c)];
          REQUIRE(n[size_t(h * row + i)] == Approx(v / (1 + std::exp(-v))).margin(1e-6));
        }
      }
      const std::vector<float> u = all_rows(UpsampledRows(x.data(), R, W, C, top, bottom), 2 * R + 2, 2 * W);
      const int64_t urow = 2 * row;
      CHECK(std::memcmp(u.data() + urow, up.data(), up.size() * 4) == 0);
      for (const int64_t h : {int64_t(0), 2 * R + 1}) {
        const bool edge = h == 0 ? top : bottom;
        const float* got = u.data() + h * urow;
        if (edge) {
          CHECK(zeros(got, urow));
          continue;
        }
        const float* src = x.data() + (h == 0 ? 0 : R + 1) * row;  // the neighbour's adjacent row, doubled in width
        for (int64_t j = 0; j < 2 * W; ++j) REQUIRE(std::memcmp(got + j * C, src + (j / 2) * C, C * 4) == 0);
      }
      // A piece's rows are the same rows.
      std::vector<float> piece(size_t(3 * row));
      GroupNormRows(s, f, x.data(), top, bottom).rows(R - 1, 3, piece.data());  // the last band rows and the halo
      CHECK(std::memcmp(piece.data(), n.data() + (R - 1) * row, piece.size() * 4) == 0);
    }
}

TEST_CASE("Conv2d::run_rows: a Winograd convolution over a row source gives the bits of one over the rows in memory",
          "[kernels][conv2d][winograd][rows]") {
  std::vector<DType> computes;  // f32: oneDNN's F(4x4, 3x3); bf16: F(2x2, 3x3) (its input type bf16, as the VAE's)
  if (winograd_available()) computes.push_back(DType::F32);
  if (compute_supported(DType::BF16)) computes.push_back(DType::BF16);
  if (computes.empty()) {
    WARN("no Winograd form on this CPU: run_rows is for Winograd convolutions only");
    return;
  }
  const std::vector<float> x = kt::randv(size_t((R + 2) * W * C), 21);
  const GroupNormSpec s = gn_spec();
  GroupNormAffine f;
  group_norm_stats(s, x.data() + W * C, nullptr, nullptr, f);
  const GroupNormRows norm_rows(s, f, x.data(), true, false);
  const UpsampledRows up_rows(x.data(), R, W, C, false, true);
  struct Case {
    const RowSource* src;
    int64_t rows, width;  // output rows and width of the convolution
    const char* what;
  };
  for (const DType compute : computes)
  for (const Case& k : {Case{&norm_rows, R, W, "GroupNorm"}, Case{&up_rows, 2 * R, 2 * W, "upsampled"}})
    for (const int64_t piece : {int64_t(0), int64_t(4)})  // one piece; pieces of 4 rows and a tail
      for (const bool acc : {false, true}) {
        INFO(dtype_name(compute) << ", " << k.what << ", piece rows " << piece << ", accumulate " << acc);
        Conv2dSpec cs;
        cs.compute = cs.input = compute;
        cs.in_channels = C;
        cs.out_channels = 16;
        cs.height = k.rows + 2;
        cs.width = k.width;
        cs.pad_rows = 0;
        cs.nhwc = true;
        cs.accumulate = acc;
        cs.winograd = true;
        cs.winograd_rows = piece;
        cs.winograd_row_source = true;
        const std::vector<float> wv = kt::randv(size_t(16 * C * 9), 22, -0.06f, 0.06f);
        Tensor w = Tensor::empty({16, C, 3, 3});
        std::copy(wv.begin(), wv.end(), w.f32());
        const Conv2d conv(cs, w, Tensor());
        Conv2dSpec in_memory = cs;  // the same over f32 rows in memory
        in_memory.input = DType::F32;
        const Conv2d conv_mem(in_memory, w, Tensor());
        REQUIRE(conv.uses_winograd());
        REQUIRE(conv_mem.uses_winograd());
        const std::vector<float> in = all_rows(*k.src, k.rows + 2, k.width);
        const std::vector<float> y0 = kt::randv(size_t(k.rows * k.width * 16), 23);
        std::vector<float> want = y0, got = y0;
        conv_mem.run(in.data(), want.data());
        conv.run_rows(*k.src, got.data());
        CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
      }
}
