#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../compute_types.h"
#include "kernel_test_util.h"
#include "runtime/conv2d.h"
#include "runtime/dtype.h"
#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/engine.h"
#include "runtime/group_norm.h"
#include "runtime/norm.h"

using namespace dit;

namespace {
// Naive layer norm over the last dim of [B, R, D], optionally modulated per batch.
std::vector<double> layer_norm_ref(const std::vector<float>& x, const float* shift, const float* scale, int64_t B,
                                   int64_t R, int64_t D, double eps) {
  std::vector<double> want(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t r = 0; r < R; ++r) {
      const float* px = x.data() + (b * R + r) * D;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < D; ++i) mean += px[i];
      mean /= D;
      for (int64_t i = 0; i < D; ++i) var += (px[i] - mean) * (px[i] - mean);
      var /= D;
      for (int64_t i = 0; i < D; ++i) {
        double n = (px[i] - mean) / std::sqrt(var + eps);
        want[(b * R + r) * D + i] = shift ? n * (1 + scale[b * D + i]) + shift[b * D + i] : n;
      }
    }
  return want;
}

struct BRD {
  int64_t b, r, d;
};
std::string brd_str(const BRD& s) {
  return "B=" + std::to_string(s.b) + " R=" + std::to_string(s.r) + " D=" + std::to_string(s.d);
}
}  // namespace

TEST_CASE("LayerNormModulate matches a naive reference", "[kernels][layernorm]") {
  // Size-1 batch / rows / dim and odd dims next to the usual ones. D = 1: every row is its
  // own mean, so the normalised value is 0 and the output is the shift.
  const BRD sh = GENERATE(values<BRD>({{2, 5, 7}, {2, 5, 64}, {1, 1, 1}, {1, 1, 3}, {1, 4, 3}, {3, 1, 1},
                                       {1, 1, 64}, {2, 1, 17}, {1, 3, 1}}));
  const int64_t B = sh.b, R = sh.r, D = sh.d;
  const float eps = 1e-6f;
  for (bool mod : {false, true}) {
    for (bool inplace : {false, true}) {
      auto x = kt::randv(B * R * D, uint32_t(D * 10 + R * 3 + B + mod), -3.f, 5.f);
      auto shift = kt::randv(B * D, 11 + uint32_t(D));
      auto scale = kt::randv(B * D, 12 + uint32_t(D));
      auto want = layer_norm_ref(x, mod ? shift.data() : nullptr, mod ? scale.data() : nullptr, B, R, D, eps);
      LayerNormModulate ln(B, R, D, eps);
      std::vector<float> y(x.size(), 7.f);
      float* out = inplace ? x.data() : y.data();
      ln.run(x.data(), out, mod ? shift.data() : nullptr, mod ? scale.data() : nullptr);
      kt::check_close(out, want.data(), want.size(), 1e-4, 1e-4,
                      "ln " + brd_str(sh) + " mod=" + std::to_string(mod) + " inplace=" + std::to_string(inplace));
    }
  }
}

// The bf16 output runs our own row kernel: every element must be the double-precision value
// correctly rounded to bf16, up to f32 arithmetic (half a bf16 ulp + 1e-5 relative). Shapes
// with rows of 1, odd dims, DiT's 1152, and 16-row tasks that straddle two batch elements
// (R = 37), so the modulation of the wrong sequence would show.
TEST_CASE("LayerNormModulate into bf16 is the reference correctly rounded", "[kernels][layernorm][bf16]") {
  const BRD sh = GENERATE(values<BRD>({{2, 37, 1152}, {2, 5, 7}, {1, 1, 1}, {3, 1, 17}, {2, 3, 64}, {1, 40, 33}}));
  const int64_t B = sh.b, R = sh.r, D = sh.d;
  for (bool mod : {false, true}) {
    auto x = kt::randv(B * R * D, uint32_t(D * 7 + R + B), -3.f, 5.f);
    auto shift = kt::randv(B * D, 21 + uint32_t(D));
    auto scale = kt::randv(B * D, 22 + uint32_t(D));
    const float* sh_p = mod ? shift.data() : nullptr;
    const float* sc_p = mod ? scale.data() : nullptr;
    auto want = layer_norm_ref(x, sh_p, sc_p, B, R, D, 1e-6);
    LayerNormModulate ln(B, R, D, 1e-6f);
    std::vector<uint16_t> y(x.size(), 0x7fc1);
    ln.run(x.data(), y.data(), sh_p, sc_p);
    size_t bad = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double w = want[i], got = bf16_to_f32(y[i]);
      const double ulp = w == 0 ? 0 : std::ldexp(1.0, std::ilogb(w) - 7);  // bf16: 8 significant bits
      if (!(std::fabs(got - w) <= 0.5 * ulp + 1e-5 * std::fabs(w) + 1e-6)) {
        if (bad++ < 3) UNSCOPED_INFO("element " << i << ": " << got << " for " << w);
      }
    }
    INFO(brd_str(sh) << " mod=" << mod);
    CHECK(bad == 0);
  }
  // bf16 output over its own input is refused rather than read while it is written.
  LayerNormModulate ln(1, 1, 4, 1e-6f);
  std::vector<float> x(4, 1.f);
  CHECK_THROWS_AS(ln.run(x.data(), reinterpret_cast<uint16_t*>(x.data()), nullptr, nullptr), Error);
}

// Channels-last GroupNorm against a double-precision reference: f32 output within 1e-4, bf16
// output within 2^-8 relative (its rounding) of the same; shapes with several pixel chunks
// (256 pixels each) and with more channels than the kernel's 1024-channel row pieces.
TEST_CASE("group_norm matches a naive reference", "[kernels][groupnorm]") {
  struct C { int64_t n, c, h, w, g; };
  for (C cs : {C{2, 8, 3, 5, 1}, C{2, 8, 3, 5, 4}, C{1, 64, 7, 9, 32}, C{2, 32, 1, 1, 32}, C{1, 96, 13, 11, 32},
               C{2, 64, 20, 30, 32}, C{1, 1056, 2, 3, 32}}) {
    const int64_t hw = cs.h * cs.w, cpg = cs.c / cs.g;
    auto x = kt::randv(cs.n * cs.c * hw, uint32_t(cs.c + cs.g), -2.f, 4.f);
    auto gamma = kt::randv(cs.c, 5, 0.5f, 1.5f);
    auto beta = kt::randv(cs.c, 6);
    for (bool silu : {false, true}) {
      std::vector<double> want(x.size());  // [n, h, w, c]
      for (int64_t n = 0; n < cs.n; ++n)
        for (int64_t g = 0; g < cs.g; ++g) {
          auto at = [&](int64_t i, int64_t c) { return (n * hw + i) * cs.c + g * cpg + c; };
          double mean = 0, var = 0;
          for (int64_t i = 0; i < hw; ++i)
            for (int64_t c = 0; c < cpg; ++c) mean += x[at(i, c)];
          mean /= double(cpg * hw);
          for (int64_t i = 0; i < hw; ++i)
            for (int64_t c = 0; c < cpg; ++c) var += (x[at(i, c)] - mean) * (x[at(i, c)] - mean);
          var /= double(cpg * hw);
          for (int64_t i = 0; i < hw; ++i)
            for (int64_t c = 0; c < cpg; ++c) {
              const int64_t ch = g * cpg + c;
              const double v = (x[at(i, c)] - mean) / std::sqrt(var + 1e-6) * gamma[ch] + beta[ch];
              want[at(i, c)] = silu ? kt::silu_ref(v) : v;
            }
        }
      GroupNormSpec s;
      s.batch = cs.n;
      s.channels = cs.c;
      s.height = cs.h;
      s.width = cs.w;
      s.groups = cs.g;
      s.silu = silu;
      s.eps = 1e-6f;
      const std::string what = "gn n=" + std::to_string(cs.n) + " c=" + std::to_string(cs.c) + " g=" +
                               std::to_string(cs.g) + " hw=" + std::to_string(hw) + " silu=" + std::to_string(silu);
      for (bool inplace : {false, true}) {
        std::vector<float> xi = x, y(x.size(), NAN);
        float* out = inplace ? xi.data() : y.data();
        group_norm(s, xi.data(), out, gamma.data(), beta.data());
        kt::check_close(out, want.data(), want.size(), 1e-4, 1e-4, what + " inplace=" + std::to_string(inplace));
      }
      s.out = DType::BF16;
      std::vector<uint16_t> yb(x.size(), 0xffff);
      group_norm(s, x.data(), yb.data(), gamma.data(), beta.data());
      std::vector<float> got(x.size());
      for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_f32(yb[i]);
      kt::check_close(got.data(), want.data(), want.size(), 0x1p-8, 1e-4, what + " bf16");
      CHECK_THROWS_AS(group_norm(s, x.data(), x.data(), gamma.data(), beta.data()), dit::Error);  // bf16 over x
    }
  }
  GroupNormSpec bad;
  bad.channels = 10;
  bad.height = bad.width = 2;
  bad.groups = 4;
  std::vector<float> x(40);
  CHECK_THROWS_AS(group_norm(bad, x.data(), x.data(), nullptr, nullptr), dit::Error);
}

// The sums run over fixed pixel chunks in a fixed order: the same bits on 1 thread as on all.
TEST_CASE("group_norm gives the same bits on one thread and on all", "[kernels][groupnorm]") {
  GroupNormSpec s;
  s.channels = 64;
  s.height = 40;
  s.width = 33;
  s.silu = true;
  auto x = kt::randv(s.channels * s.height * s.width, 17, -3.f, 5.f);
  auto gamma = kt::randv(s.channels, 5, 0.5f, 1.5f), beta = kt::randv(s.channels, 6);
  std::vector<float> one(x.size()), all(x.size());
  const int threads = dit::num_threads();
  dit::set_num_threads(1);
  group_norm(s, x.data(), one.data(), gamma.data(), beta.data());
  dit::set_num_threads(std::max(2, threads));
  group_norm(s, x.data(), all.data(), gamma.data(), beta.data());
  dit::set_num_threads(threads);
  CHECK(one == all);
}

namespace {
std::vector<double> conv_ref(const Conv2dSpec& s, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>* bias, const std::vector<float>& y0) {
  const int64_t OH = s.out_height(), OW = s.out_width(), K = s.kernel;
  std::vector<double> y(s.batch * s.out_channels * OH * OW);
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t o = 0; o < s.out_channels; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias ? (*bias)[o] : 0.0;
          for (int64_t c = 0; c < s.in_channels; ++c)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                int64_t ih = oh * s.stride - s.padding + kh, iw = ow * s.stride - s.padding + kw;
                if (ih < 0 || iw < 0 || ih >= s.height || iw >= s.width) continue;
                acc += double(x[((n * s.in_channels + c) * s.height + ih) * s.width + iw]) *
                       w[((o * s.in_channels + c) * K + kh) * K + kw];
              }
          const int64_t idx = ((n * s.out_channels + o) * OH + oh) * OW + ow;
          y[idx] = s.accumulate ? acc + y0[idx] : acc;
        }
  return y;
}
}  // namespace

namespace {
// Values as a bf16 convolution sees them: rounded to nearest even (f32_to_bf16), back in f32.
std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& x : v) x = dit::bf16_to_f32(dit::f32_to_bf16(x));
  return v;
}
}  // namespace

// NCHW -> NHWC (to_last) or NHWC -> NCHW, for the channels-last cases.
std::vector<float> relayout(const std::vector<float>& v, int64_t n, int64_t c, int64_t hw, bool to_last) {
  std::vector<float> r(v.size());
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < hw; ++i) {
        const int64_t nchw = (b * c + ch) * hw + i, nhwc = (b * hw + i) * c + ch;
        r[size_t(to_last ? nhwc : nchw)] = v[size_t(to_last ? nchw : nhwc)];
      }
  return r;
}

// Every layout (NCHW through oneDNN's blocked layout, NCHW in place, channels last with an
// f32 x, channels last with a bf16 x), f32 and, where the CPU computes it, bf16: the reference
// then takes x and w rounded to bf16 (what the convolution multiplies), so both are held to
// the f32 accumulation's 1e-4.
TEST_CASE("Conv2d matches a naive reference", "[kernels][conv2d]") {
  enum Mode { Blocked, Plain, Nhwc, NhwcBf16In };
  const char* mode_name[] = {"blocked", "nchw", "nhwc", "nhwc-bf16-x"};
  struct C { int64_t n, ci, co, h, w, k, s, p; };
  for (DType compute : dit_test::compute_types())
  for (C c : {C{2, 3, 5, 7, 9, 1, 1, 0}, C{2, 4, 8, 8, 8, 3, 1, 1}, C{1, 5, 7, 9, 11, 3, 1, 1},
              C{2, 4, 24, 8, 6, 2, 2, 0}, C{1, 32, 16, 6, 5, 3, 1, 1}, C{1, 16, 3, 5, 5, 3, 1, 1},
              // edge shapes: 1x1 spatial input (3x3 padded and 1x1 kernels), a single input
              // channel, a single output channel, and everything 1
              C{2, 4, 6, 1, 1, 3, 1, 1}, C{1, 3, 5, 1, 1, 1, 1, 0}, C{2, 1, 4, 5, 6, 3, 1, 1}, C{1, 1, 8, 4, 4, 2, 2, 0},
              C{2, 6, 1, 5, 7, 3, 1, 1}, C{1, 16, 1, 4, 3, 1, 1, 0}, C{1, 1, 1, 1, 1, 1, 1, 0},
              C{1, 1, 1, 1, 1, 3, 1, 1}}) {
    for (bool acc : {false, true})
      for (bool bias : {false, true})
        for (Mode mode : {Blocked, Plain, Nhwc, NhwcBf16In}) {
          const bool bf16 = compute == DType::BF16;
          if (bf16 && mode == Plain) continue;    // bf16 converts an NCHW x in the layout reorder
          if (!bf16 && mode == NhwcBf16In) continue;  // a bf16 x needs bf16 compute
          Conv2dSpec s;
          s.compute = compute;
          s.batch = c.n;
          s.in_channels = c.ci;
          s.out_channels = c.co;
          s.height = c.h;
          s.width = c.w;
          s.kernel = c.k;
          s.stride = c.s;
          s.padding = c.p;
          s.accumulate = acc;
          s.blocked = mode == Blocked;
          s.nhwc = mode == Nhwc || mode == NhwcBf16In;
          s.input = mode == NhwcBf16In ? DType::BF16 : DType::F32;
          auto x = kt::randv(c.n * c.ci * c.h * c.w, uint32_t(c.ci * 7 + c.co));
          auto w = kt::randv(c.co * c.ci * c.k * c.k, uint32_t(c.k * 3 + c.co), -0.5f, 0.5f);
          auto b = kt::randv(c.co, 3);
          const int64_t ohw = s.out_height() * s.out_width();
          auto y0 = kt::randv(c.n * c.co * ohw, 4);
          Tensor wt = Tensor::empty({c.co, c.ci, c.k, c.k});
          std::copy(w.begin(), w.end(), wt.f32());
          Tensor bt;
          if (bias) {
            bt = Tensor::empty({c.co});
            std::copy(b.begin(), b.end(), bt.f32());
          }
          Conv2d conv(s, wt, bt);
          std::vector<float> y = s.nhwc ? relayout(y0, c.n, c.co, ohw, true) : y0;
          const std::vector<float> xl = s.nhwc ? relayout(x, c.n, c.ci, c.h * c.w, true) : x;
          if (mode == NhwcBf16In) {
            std::vector<uint16_t> xb(xl.size());
            for (size_t i = 0; i < xl.size(); ++i) xb[i] = f32_to_bf16(xl[i]);
            conv.run(xb.data(), y.data());
          } else {
            conv.run(xl.data(), y.data());
          }
          if (s.nhwc) y = relayout(y, c.n, c.co, ohw, false);
          auto want = conv_ref(s, bf16 ? bf16_rounded(x) : x, bf16 ? bf16_rounded(w) : w, bias ? &b : nullptr, y0);
          kt::check_close(y.data(), want.data(), want.size(), 1e-4, 1e-4,
                          "conv k" + std::to_string(c.k) + " ci" + std::to_string(c.ci) + " acc" + std::to_string(acc) +
                              " " + mode_name[mode] + " " + dtype_name(compute) + " impl " + conv.impl_info());
        }
  }
}

TEST_CASE("Conv2d refuses bf16 compute on the unblocked path", "[kernels][conv2d]") {
  if (!dit_test::bf16_available()) return;
  Conv2dSpec s;
  s.in_channels = s.out_channels = 4;
  s.height = s.width = 4;
  s.blocked = false;
  s.compute = DType::BF16;
  Tensor w = Tensor::empty({4, 4, 3, 3});
  CHECK_THROWS_WITH(Conv2d(s, w, Tensor()), Catch::Contains("bf16 compute converts x in the layout reorder"));
  s.blocked = true;
  s.input = DType::BF16;  // a bf16 x is channels last only
  CHECK_THROWS_WITH(Conv2d(s, w, Tensor()), Catch::Contains("a bf16 x needs bf16 compute and the channels-last layout"));
  s.nhwc = true;
  Conv2d ok(s, w, Tensor());
  std::vector<float> x(4 * 4 * 4), y(4 * 4 * 4);
  CHECK_THROWS_WITH(ok.run(x.data(), y.data()), Catch::Contains("takes bf16"));  // an f32 x to a bf16-x convolution
}

TEST_CASE("Conv2d chain sharing one workspace matches a naive reference", "[kernels][conv2d]") {
  // Small convolution built first, larger ones after (the workspace grows after the first
  // one is built, so it must pick up the new buffers), then run in order, one feeding the next.
  struct C { int64_t ci, co, h, k; bool acc; };
  const std::vector<C> chain = {{4, 16, 5, 3, false}, {16, 32, 5, 3, true}, {32, 48, 5, 1, false}, {48, 8, 5, 3, false}};
  auto ws = std::make_shared<Conv2dWorkspace>();
  std::vector<Conv2d> convs;
  std::vector<Conv2dSpec> specs;
  std::vector<std::vector<float>> ws_host, bs;
  for (size_t i = 0; i < chain.size(); ++i) {
    const C& c = chain[i];
    Conv2dSpec s;
    s.batch = 2;
    s.in_channels = c.ci;
    s.out_channels = c.co;
    s.height = s.width = c.h;
    s.kernel = c.k;
    s.padding = c.k / 2;
    s.accumulate = c.acc;
    auto w = kt::randv(c.co * c.ci * c.k * c.k, uint32_t(11 + i), -0.3f, 0.3f);
    auto b = kt::randv(c.co, uint32_t(21 + i));
    Tensor wt = Tensor::empty({c.co, c.ci, c.k, c.k}), bt = Tensor::empty({c.co});
    std::copy(w.begin(), w.end(), wt.f32());
    std::copy(b.begin(), b.end(), bt.f32());
    convs.emplace_back(s, wt, bt, ws);
    specs.push_back(s);
    ws_host.push_back(w);
    bs.push_back(b);
  }
  std::vector<float> x = kt::randv(2 * 4 * 25, 5);
  std::vector<double> want_d(x.begin(), x.end());
  for (size_t i = 0; i < chain.size(); ++i) {
    const Conv2dSpec& s = specs[i];
    std::vector<float> y0 = kt::randv(s.batch * s.out_channels * 25, uint32_t(31 + i));
    std::vector<float> y = y0;
    convs[i].run(x.data(), y.data());
    auto want = conv_ref(s, x, ws_host[i], &bs[i], y0);
    kt::check_close(y.data(), want.data(), want.size(), 1e-4, 1e-4, "shared-workspace conv " + std::to_string(i));
    x = y;
  }
  CHECK(ws->bytes() > 0);
}

TEST_CASE("elementwise ops match naive references", "[kernels][elementwise]") {
  const int64_t n = 40000 + 3;  // crosses the OpenMP chunking
  auto x = kt::randv(n, 1, -12.f, 12.f);
  auto x2 = kt::randv(n, 2);
  std::vector<float> y(n);
  std::vector<double> want(n);
  silu(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = kt::silu_ref(x[i]);
  kt::check_close(y.data(), want.data(), n, 1e-5, 1e-6, "silu");
  gelu_tanh(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = kt::gelu_tanh_ref(x[i]);
  kt::check_close(y.data(), want.data(), n, 1e-5, 1e-6, "gelu_tanh");
  add(x.data(), x2.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = double(x[i]) + x2[i];
  kt::check_close(y.data(), want.data(), n, 1e-7, 0, "add");
  // in place
  std::vector<float> z = x;
  silu(z.data(), z.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = kt::silu_ref(x[i]);
  kt::check_close(z.data(), want.data(), n, 1e-5, 1e-6, "silu in place");
  // extreme inputs
  std::vector<float> e = {-1000.f, -88.f, -50.f, 0.f, 50.f, 1000.f};
  std::vector<float> ey(e.size());
  silu(e.data(), ey.data(), int64_t(e.size()));
  for (size_t i = 0; i < e.size(); ++i) CHECK(std::isfinite(ey[i]));
  CHECK(ey[5] == 1000.f);
  gelu_tanh(e.data(), ey.data(), int64_t(e.size()));
  CHECK(ey[0] == 0.f);
  CHECK(ey[5] == 1000.f);

}

TEST_CASE("silu and gelu_tanh on tiny and odd lengths", "[kernels][elementwise]") {
  const int64_t n = GENERATE(1, 3, 17);
  auto x = kt::randv(n, uint32_t(100 + n), -6.f, 6.f);
  std::vector<float> y(n + 1, 123.f);  // one guard element past the end
  std::vector<double> want(n);
  silu(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = kt::silu_ref(x[i]);
  kt::check_close(y.data(), want.data(), n, 1e-5, 1e-6, "silu n=" + std::to_string(n));
  CHECK(y[n] == 123.f);
  gelu_tanh(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = kt::gelu_tanh_ref(x[i]);
  kt::check_close(y.data(), want.data(), n, 1e-5, 1e-6, "gelu_tanh n=" + std::to_string(n));
  CHECK(y[n] == 123.f);
  std::vector<float> z = x;
  silu(z.data(), z.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = kt::silu_ref(x[i]);
  kt::check_close(z.data(), want.data(), n, 1e-5, 1e-6, "silu in place n=" + std::to_string(n));
}

TEST_CASE("gated_residual_add matches a naive reference", "[kernels][elementwise]") {
  // Size-1 batch / rows / dim, odd dims, and one shape large enough for the parallel path.
  const BRD sh = GENERATE(values<BRD>({{2, 3, 5}, {1, 1, 1}, {1, 1, 3}, {1, 4, 1}, {3, 1, 1}, {3, 1, 17},
                                       {2, 7, 2}, {2, 130, 70}}));
  const int64_t B = sh.b, R = sh.r, D = sh.d;
  const uint32_t seed = uint32_t(B * 1000 + R * 10 + D);
  auto f = kt::randv(B * R * D, seed + 7), g = kt::randv(B * D, seed + 8), xs = kt::randv(B * R * D, seed + 9);
  std::vector<double> w2(B * R * D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < D; ++j) {
        const int64_t k = (b * R + i) * D + j;
        w2[k] = xs[k] + double(g[b * D + j]) * f[k];
      }
  std::vector<float> r = xs;
  gated_residual_add(f.data(), g.data(), r.data(), B, R, D);
  kt::check_close(r.data(), w2.data(), r.size(), 1e-6, 1e-6, "gated_residual_add " + brd_str(sh));
}

TEST_CASE("upsample_nearest2x", "[kernels][elementwise][upsample]") {
  struct NHWC {
    int64_t n, h, w, c;
  };
  // 1x1 spatial, single rows / columns, and one shape large enough for the parallel path;
  // f32 output exact, bf16 output each value rounded to nearest even.
  const NHWC sh = GENERATE(values<NHWC>({{2, 5, 7, 3}, {1, 1, 1, 1}, {2, 1, 1, 3}, {1, 1, 5, 2}, {1, 3, 1, 2},
                                         {1, 64, 65, 4}}));
  const int64_t N = sh.n, C = sh.c, H = sh.h, W = sh.w;
  const std::string what =
      "upsample " + std::to_string(N) + "x" + std::to_string(H) + "x" + std::to_string(W) + "x" + std::to_string(C);
  auto x = kt::randv(N * C * H * W, uint32_t(3 + H * 100 + W));
  const size_t n_out = size_t(N * C * 4 * H * W);
  std::vector<float> y(n_out + 1, -1.f), want(y.size(), -1.f);  // last: guard element
  upsample_nearest2x(x.data(), y.data(), DType::F32, N, H, W, C);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < 2 * H; ++i)
      for (int64_t j = 0; j < 2 * W; ++j)
        for (int64_t c = 0; c < C; ++c)
          want[((n * 2 * H + i) * 2 * W + j) * C + c] = x[((n * H + i / 2) * W + j / 2) * C + c];
  kt::check_close(y, want, 0, 0, what);
  std::vector<uint16_t> yb(n_out + 1, 0xabcd);
  upsample_nearest2x(x.data(), yb.data(), DType::BF16, N, H, W, C);
  int64_t bad = 0;
  for (size_t i = 0; i < n_out; ++i) bad += yb[i] != f32_to_bf16(want[i]);
  INFO(what << " bf16");
  CHECK(bad == 0);
  CHECK(yb[n_out] == 0xabcd);
}
