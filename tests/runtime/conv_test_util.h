// Helpers shared by the convolution tests: a 3x3 channels-last case, its Conv2dSpec, random
// data of unit gain, and a naive convolution in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernel_test_util.h"
#include "runtime/conv2d.h"
#include "tests/scoped_threads.h"

namespace conv_test {

using namespace dit;

struct Case {
  int64_t batch, ci, co, h, w;  // h: output rows
  bool halo;                    // x carries a row above and below (pad_rows 0), else padding 1
  int64_t piece_rows;           // Conv2dSpec::winograd_rows (0: the default)
};

inline Conv2dSpec spec_of(const Case& c, bool accumulate, bool winograd) {
  Conv2dSpec s;
  s.batch = c.batch;
  s.in_channels = c.ci;
  s.out_channels = c.co;
  s.kernel = 3;
  s.padding = 1;
  s.pad_rows = c.halo ? 0 : 1;
  s.height = c.halo ? c.h + 2 : c.h;
  s.width = c.w;
  s.nhwc = true;
  s.accumulate = accumulate;
  s.winograd = winograd;
  s.winograd_rows = c.piece_rows;
  return s;
}

// y [N, OH, OW, O] = conv(x [N, H, W, C]) + b (+ y0), in double.
inline std::vector<double> conv_nhwc_ref(const Conv2dSpec& s, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>* b, const std::vector<float>* y0) {
  const int64_t OH = s.out_height(), OW = s.out_width(), C = s.in_channels, O = s.out_channels;
  const int64_t pr = s.row_padding();
  std::vector<double> y(size_t(s.batch * OH * OW * O));
  for (int64_t n = 0; n < s.batch; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t o = 0; o < O; ++o) {
          double acc = b ? (*b)[size_t(o)] : 0.0;
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 3; ++kw) {
              const int64_t ih = oh - pr + kh, iw = ow - s.padding + kw;
              if (ih < 0 || iw < 0 || ih >= s.height || iw >= s.width) continue;
              const float* px = x.data() + ((n * s.height + ih) * s.width + iw) * C;
              for (int64_t c = 0; c < C; ++c) acc += double(px[c]) * w[size_t(((o * C + c) * 3 + kh) * 3 + kw)];
            }
          const size_t i = size_t(((n * OH + oh) * OW + ow) * O + o);
          y[i] = acc + (y0 ? (*y0)[i] : 0.0);
        }
  return y;
}

inline double max_error(const std::vector<float>& got, const std::vector<double>& want) {
  double e = 0;
  for (size_t i = 0; i < got.size(); ++i) e = std::max(e, std::fabs(got[i] - want[i]));
  return e;
}

struct Data {
  std::vector<float> x, w, b, y0;
  Tensor wt, bt;
};
inline Data data_for(const Conv2dSpec& s, uint32_t seed) {
  Data d;
  d.x = kt::randv(size_t(s.batch * s.height * s.width * s.in_channels), seed);
  // Weights of unit gain: the outputs stay of order 1, as in a network.
  const float a = 1.0f / std::sqrt(9.0f * float(s.in_channels));
  d.w = kt::randv(size_t(s.out_channels * s.in_channels * 9), seed + 1, -a, a);
  d.b = kt::randv(size_t(s.out_channels), seed + 2);
  d.y0 = kt::randv(size_t(s.batch * s.out_height() * s.out_width() * s.out_channels), seed + 3);
  d.wt = Tensor::empty({s.out_channels, s.in_channels, 3, 3});
  std::copy(d.w.begin(), d.w.end(), d.wt.f32());
  d.bt = Tensor::empty({s.out_channels});
  std::copy(d.b.begin(), d.b.end(), d.bt.f32());
  return d;
}

inline std::vector<float> run(const Conv2d& c, const Data& d, bool accumulate) {
  std::vector<float> y = accumulate ? d.y0 : std::vector<float>(d.y0.size(), 0.f);
  c.run(d.x.data(), y.data());
  return y;
}

// The convolution of spec s run on 1, 2 and 3 threads gives the same bits; returns the output.
inline std::vector<float> check_same_bits_on_threads(const Conv2dSpec& s, const Data& d, bool accumulate) {
  std::vector<std::vector<float>> ys;
  for (const int t : {1, 2, 3}) {
    const dit_test::ScopedThreads threads(t);
    ys.push_back(run(Conv2d(s, d.wt, d.bt), d, accumulate));
  }
  CHECK(std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * 4) == 0);
  CHECK(std::memcmp(ys[0].data(), ys[2].data(), ys[0].size() * 4) == 0);
  return ys[0];
}

// The input of a band of rows [b, e) of x [1, h, W, C] with its halo rows: x's rows b - 1 .. e,
// zeros for those outside the image.
inline std::vector<float> band_input(const std::vector<float>& x, int64_t b, int64_t e, int64_t h, int64_t W,
                                     int64_t C) {
  std::vector<float> band(size_t((e - b + 2) * W * C), 0.f);
  for (int64_t r = std::max<int64_t>(b - 1, 0); r <= std::min(e, h - 1); ++r)
    std::copy(x.begin() + r * W * C, x.begin() + (r + 1) * W * C, band.begin() + (r - b + 1) * W * C);
  return band;
}

}  // namespace conv_test
