// The bf16 Winograd form (F(2×2, 3×3), runtime/conv2d_winograd_bf16.h) against a naive
// convolution in double. On data whose transforms, products and sums are all exact in bf16 and
// f32 (small integers) it must give the exact convolution, bit for bit: pieces of tile rows and a
// tail piece, odd heights and widths, padding above and below or halo rows, the residual added,
// bias or none, two images, x in f32 or bf16. On random data its error stays within a small
// multiple of the direct bf16 kernel's; and the bits do not depend on the thread count.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "conv_test_util.h"
#include "kernel_test_util.h"
#include "runtime/conv2d.h"
#include "runtime/engine.h"

using namespace dit;

namespace winograd_bf16_test {

using namespace conv_test;

bool bf16_here() {
  if (compute_supported(DType::BF16)) return true;
  WARN("no bf16 compute on this CPU: the bf16 Winograd form is not checked");
  return false;
}

Conv2dSpec bf16_spec(const Case& c, bool accumulate, bool winograd, DType input = DType::F32) {
  Conv2dSpec s = spec_of(c, accumulate, winograd);
  s.compute = DType::BF16;
  s.input = input;
  return s;
}

// Integers in [-2, 2] (x, w) and [-4, 4] (b, y0): V = Bᵀ d B and U = G g Gᵀ (quarters) are exact
// in bf16, and every product and sum after them exact in f32.
Data exact_data(const Conv2dSpec& s, uint32_t seed) {
  Data d = data_for(s, seed);
  auto ints = [](std::vector<float>& v, float scale) {
    for (float& x : v) x = std::round(x * scale);
  };
  ints(d.x, 2.f);
  for (float& w : d.w) w = std::round(w * 2.f * std::sqrt(9.0f * float(s.in_channels)));
  ints(d.b, 4.f);
  ints(d.y0, 4.f);
  std::copy(d.w.begin(), d.w.end(), d.wt.f32());
  std::copy(d.b.begin(), d.b.end(), d.bt.f32());
  return d;
}

std::vector<float> run_bf16_x(const Conv2d& c, const Data& d, bool accumulate) {
  std::vector<uint16_t> xb(d.x.size());
  for (size_t i = 0; i < xb.size(); ++i) xb[i] = f32_to_bf16(d.x[i]);
  std::vector<float> y = accumulate ? d.y0 : std::vector<float>(d.y0.size(), 0.f);
  c.run(xb.data(), y.data());
  return y;
}

// nearest2x(x) for a nearest-2x spec `s` (x: [batch, height, width, C], its halo rows included
// in the halo form, which upsample to one row each), and the plain spec of the convolution over it.
std::vector<float> upsampled(const Conv2dSpec& s, const std::vector<float>& x, Conv2dSpec* plain) {
  *plain = s;
  plain->nearest2x_input = false;
  plain->height = s.conv_height();
  plain->width = s.conv_width();
  const int64_t C = s.in_channels, halo = s.row_padding() == 0;
  std::vector<float> u(size_t(s.batch * plain->height * plain->width * C));
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t r = 0; r < plain->height; ++r)
      for (int64_t j = 0; j < plain->width; ++j) {
        const int64_t xr = halo ? (r + 1) / 2 : r / 2;  // the halo rows repeat themselves once
        const float* from = x.data() + ((n * s.height + xr) * s.width + j / 2) * C;
        std::copy(from, from + C, u.begin() + ((n * plain->height + r) * plain->width + j) * C);
      }
  return u;
}

}  // namespace winograd_bf16_test

using namespace winograd_bf16_test;

TEST_CASE("bf16 Winograd Conv2d gives the exact convolution where bf16 is exact: pieces, tails, odd sizes, padding",
          "[kernels][conv2d][winograd][bf16]") {
  if (!bf16_here()) return;
  const std::vector<Case> cases = {
      {1, 16, 16, 8, 8, true, 0},    // one piece
      {1, 32, 48, 13, 11, true, 4},  // pieces of 2 tile rows, a tail piece; odd height and width
      {2, 32, 16, 10, 7, true, 8},   // two images, a piece of 4 tile rows and a tail
      {1, 16, 32, 9, 12, false, 0},  // padding above and below
      {2, 48, 32, 6, 5, false, 4},   // the same in pieces
      {1, 64, 64, 40, 33, true, 0},  // the default piece size
      {1, 16, 16, 1, 3, true, 0},    // one output row
      {1, 24, 40, 7, 1, false, 2},   // one output column, pieces of one tile row
  };
  for (const Case& c : cases)
    for (const bool acc : {false, true})
      for (const bool bias : {false, true})
        for (const DType input : {DType::F32, DType::BF16}) {
          const Conv2dSpec s = bf16_spec(c, acc, true, input);
          const Data d = exact_data(s, uint32_t(c.ci + 3 * c.co + c.h));
          const Conv2d conv(s, d.wt, bias ? d.bt : Tensor());
          CHECK(conv.uses_winograd());
          CHECK(conv.impl_info().find("winograd_f2x2_bf16") != std::string::npos);
          const std::vector<double> want = conv_nhwc_ref(s, d.x, d.w, bias ? &d.b : nullptr, acc ? &d.y0 : nullptr);
          const std::vector<float> got = input == DType::BF16 ? run_bf16_x(conv, d, acc) : run(conv, d, acc);
          kt::check_close(got.data(), want.data(), want.size(), 0.0, 0.0,
                          "bf16 winograd ci" + std::to_string(c.ci) + " co" + std::to_string(c.co) + " h" +
                              std::to_string(c.h) + " w" + std::to_string(c.w) + (c.halo ? " halo" : " padded") +
                              " acc" + std::to_string(acc) + " bias" + std::to_string(bias) + " x " +
                              dtype_name(input));
        }
}

TEST_CASE("bf16 Winograd Conv2d: error against exact arithmetic within 2.5x the direct bf16 kernel's",
          "[kernels][conv2d][winograd][bf16]") {
  if (!bf16_here()) return;
  for (const Case& c : {Case{1, 128, 128, 16, 24, true, 0}, Case{1, 256, 128, 8, 16, true, 4},
                        Case{1, 64, 256, 12, 10, false, 0}}) {
    const Conv2dSpec sw = bf16_spec(c, false, true), sd = bf16_spec(c, false, false);
    const Data d = data_for(sw, 5);
    const std::vector<double> want = conv_nhwc_ref(sw, d.x, d.w, &d.b, nullptr);
    const double ew = max_error(run(Conv2d(sw, d.wt, d.bt), d, false), want);
    const double ed = max_error(run(Conv2d(sd, d.wt, d.bt), d, false), want);
    INFO("channels " << c.ci << " -> " << c.co << ": max error bf16 Winograd " << ew << ", direct bf16 " << ed);
    CHECK(ew <= 2.5 * ed);
    CHECK(ew < 0.05);  // outputs of order 1
  }
}

TEST_CASE("bf16 Winograd Conv2d gives the same bits on 1, 2 and 3 threads", "[kernels][conv2d][winograd][bf16]") {
  if (!bf16_here()) return;
  for (const Case& c : {Case{1, 64, 64, 24, 20, true, 8}, Case{1, 128, 64, 9, 16, true, 4},
                        Case{2, 32, 32, 7, 9, false, 0}, Case{1, 512, 512, 16, 16, true, 0}})
    for (const bool acc : {false, true}) {
      const Conv2dSpec s = bf16_spec(c, acc, true);
      INFO("ci " << c.ci << " co " << c.co << " h " << c.h << " acc " << acc);
      check_same_bits_on_threads(s, data_for(s, 9), acc);
    }
}

TEST_CASE("bf16 Winograd Conv2d: a band of rows starting at an odd image row gives the whole image's bits",
          "[kernels][conv2d][winograd][bf16]") {
  if (!bf16_here()) return;
  // The whole image: 13 output rows, padding above and below. Its bands: output rows [b, e) with
  // their halo rows (x's rows b - 1 .. e, zeros outside), tiles from the image's even rows.
  const Case whole_case{1, 32, 24, 13, 9, false, 0};
  const Conv2dSpec ws = bf16_spec(whole_case, false, true);
  const Data d = data_for(ws, 17);
  const std::vector<float> whole = run(Conv2d(ws, d.wt, d.bt), d, false);
  const int64_t W = whole_case.w, C = whole_case.ci, O = whole_case.co;
  for (const auto [b, e, piece] : {std::array<int64_t, 3>{5, 11, 0}, {0, 7, 0}, {3, 13, 4}, {1, 2, 0}, {8, 13, 2}}) {
    INFO("band rows " << b << " .. " << e - 1 << ", piece rows " << piece);
    Conv2dSpec bs = bf16_spec(Case{1, C, O, e - b, W, true, piece}, false, true);
    bs.image_row = b;
    Data bd = d;
    bd.x = band_input(d.x, b, e, whole_case.h, W, C);
    bd.y0.assign(size_t((e - b) * W * O), 0.f);
    const std::vector<float> band = run(Conv2d(bs, d.wt, d.bt), bd, false);
    CHECK(std::memcmp(band.data(), whole.data() + b * W * O, band.size() * 4) == 0);
  }
}

TEST_CASE("bf16 Winograd Conv2d of a nearest-2x input: the exact convolution of the upsampled input where bf16 is exact",
          "[kernels][conv2d][winograd][bf16]") {
  if (!bf16_here()) return;
  // h, w: x's rows (without halo rows) and columns; the output has twice as many.
  const std::vector<Case> cases = {
      {1, 16, 16, 4, 4, true, 0},  {1, 32, 48, 7, 5, true, 4},   {2, 32, 16, 5, 3, true, 8},
      {1, 16, 32, 5, 6, false, 0}, {2, 48, 32, 3, 3, false, 4},  {1, 64, 64, 20, 17, true, 0},
      {1, 16, 16, 1, 1, true, 0},  {1, 24, 40, 6, 1, false, 2},
  };
  for (const Case& c : cases)
    for (const bool acc : {false, true})
      for (const bool bias : {false, true})
        for (const DType input : {DType::F32, DType::BF16}) {
          Conv2dSpec s = bf16_spec(c, acc, true, input);
          s.nearest2x_input = true;
          const Data d = exact_data(s, uint32_t(c.ci + 3 * c.co + c.h));
          const Conv2d conv(s, d.wt, bias ? d.bt : Tensor());
          CHECK(conv.uses_winograd());
          CHECK(conv.impl_info().find("winograd_up2") != std::string::npos);
          Conv2dSpec plain;
          const std::vector<float> up = upsampled(s, d.x, &plain);
          REQUIRE(plain.out_height() == 2 * c.h);
          REQUIRE(plain.out_width() == 2 * c.w);
          const std::vector<double> want = conv_nhwc_ref(plain, up, d.w, bias ? &d.b : nullptr, acc ? &d.y0 : nullptr);
          const std::vector<float> got = input == DType::BF16 ? run_bf16_x(conv, d, acc) : run(conv, d, acc);
          kt::check_close(got.data(), want.data(), want.size(), 0.0, 0.0,
                          "bf16 winograd of nearest2x ci" + std::to_string(c.ci) + " co" + std::to_string(c.co) +
                              " h" + std::to_string(c.h) + " w" + std::to_string(c.w) +
                              (c.halo ? " halo" : " padded") + " acc" + std::to_string(acc) + " bias" +
                              std::to_string(bias) + " x " + dtype_name(input));
        }
}

// The phases' kernels sum up to four weights, their U up to sixteen: the error is F(2x2, 3x3)'s
// order (0.0061-0.0073 against its 0.0057 at these sizes), 1.8-2.5x the direct kernel's.
TEST_CASE("bf16 Winograd Conv2d of a nearest-2x input: error within 3x the direct bf16 kernel's over the upsampled input",
          "[kernels][conv2d][winograd][bf16]") {
  if (!bf16_here()) return;
  for (const Case& c : {Case{1, 128, 128, 8, 12, true, 0}, Case{1, 256, 128, 4, 8, true, 4}}) {
    Conv2dSpec sw = bf16_spec(c, false, true);
    sw.nearest2x_input = true;
    const Data d = data_for(sw, 5);
    Conv2dSpec plain;
    Data du = d;
    du.x = upsampled(sw, d.x, &plain);
    du.y0.assign(size_t(plain.out_height() * plain.out_width() * c.co), 0.f);
    Conv2dSpec sd = plain;
    sd.winograd = false;
    const std::vector<double> want = conv_nhwc_ref(plain, du.x, d.w, &d.b, nullptr);
    const double ew = max_error(run(Conv2d(sw, d.wt, d.bt), d, false), want);
    const double ed = max_error(run(Conv2d(sd, d.wt, d.bt), du, false), want);
    INFO("channels " << c.ci << " -> " << c.co << ": max error " << ew << ", direct bf16 " << ed);
    CHECK(ew <= 3 * ed);
    CHECK(ew < 0.05);
  }
}

TEST_CASE("bf16 Winograd Conv2d of a nearest-2x input: a band from an odd row, and any thread count, give the same bits",
          "[kernels][conv2d][winograd][bf16]") {
  if (!bf16_here()) return;
  const Case whole_case{1, 32, 24, 11, 7, false, 0};  // x: 11 rows, padding above and below
  Conv2dSpec ws = bf16_spec(whole_case, false, true);
  ws.nearest2x_input = true;
  const Data d = data_for(ws, 19);
  const std::vector<float> whole = check_same_bits_on_threads(ws, d, false);
  const int64_t W = whole_case.w, C = whole_case.ci, O = whole_case.co;
  for (const auto [b, e, piece] : {std::array<int64_t, 3>{5, 9, 0}, {0, 3, 0}, {3, 11, 4}, {1, 2, 0}, {7, 11, 2}}) {
    INFO("band of x's rows " << b << " .. " << e - 1 << ", piece rows " << piece);
    Conv2dSpec bs = bf16_spec(Case{1, C, O, e - b, W, true, piece}, false, true);
    bs.nearest2x_input = true;
    bs.image_row = b;
    Data bd = d;
    bd.x = band_input(d.x, b, e, whole_case.h, W, C);
    bd.y0.assign(size_t(2 * (e - b) * 2 * W * O), 0.f);
    const std::vector<float> band = run(Conv2d(bs, d.wt, d.bt), bd, false);
    CHECK(std::memcmp(band.data(), whole.data() + 2 * b * 2 * W * O, band.size() * 4) == 0);
  }
}
