// Winograd convolutions (Conv2dSpec::winograd, runtime/conv2d_winograd.h) against a naive
// convolution in double: the halo form in pieces of rows (a tail piece among them), padding
// above and below in one piece, the residual added, bias or none, two images; the error against
// exact arithmetic the direct kernel's; the same bits on 1, 2 and 3 threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "conv_test_util.h"
#include "kernel_test_util.h"
#include "runtime/conv2d.h"

using namespace dit;

// (A named namespace: the test files are compiled several to a translation unit.)
namespace winograd_test {

using namespace conv_test;

// Whether oneDNN has its Winograd kernel here (f32 on AVX-512; ONEDNN_MAX_CPU_ISA=AVX2 has none),
// with a warning where it has not.
bool winograd_here() {
  const bool ok = dit::winograd_available();
  if (!ok) WARN("no Winograd kernel on this CPU: the convolutions checked are the direct ones it falls back to");
  return ok;
}

}  // namespace winograd_test

using namespace winograd_test;

TEST_CASE("Winograd Conv2d matches a naive convolution: pieces of rows, a tail piece, padding, residual",
          "[kernels][conv2d][winograd]") {
  const bool available = winograd_here();
  const std::vector<Case> cases = {
      {1, 16, 16, 8, 8, true, 0},     // one piece
      {1, 32, 48, 13, 11, true, 4},   // pieces of 4 rows and a tail piece (13 = 3 x 4 + 1)
      {2, 32, 16, 10, 7, true, 8},    // two images, a piece of 8 and a tail of 2
      {1, 16, 32, 9, 12, false, 0},   // padding above and below: one piece
      {2, 48, 32, 6, 5, false, 0},
      {1, 64, 64, 40, 33, true, 0},   // the default piece size at a small width (one piece)
      {1, 16, 16, 1, 3, true, 0},     // one output row
  };
  for (const Case& c : cases)
    for (const bool acc : {false, true})
      for (const bool bias : {false, true}) {
        const Conv2dSpec s = spec_of(c, acc, true);
        const Data d = data_for(s, uint32_t(c.ci + 3 * c.co + c.h));
        const Conv2d conv(s, d.wt, bias ? d.bt : Tensor());
        if (available) CHECK(conv.uses_winograd());
        const std::vector<double> want = conv_nhwc_ref(s, d.x, d.w, bias ? &d.b : nullptr, acc ? &d.y0 : nullptr);
        const std::vector<float> got = run(conv, d, acc);
        kt::check_close(got.data(), want.data(), want.size(), 1e-5, 1e-5,
                        "winograd ci" + std::to_string(c.ci) + " co" + std::to_string(c.co) + " h" + std::to_string(c.h) +
                            (c.halo ? " halo" : " padded") + " acc" + std::to_string(acc) + " bias" +
                            std::to_string(bias) + " impl " + conv.impl_info());
      }
}

TEST_CASE("Winograd Conv2d: error against exact arithmetic within a few times the direct kernel's",
          "[kernels][conv2d][winograd]") {
  if (!winograd_here()) return;
  for (const Case& c : {Case{1, 128, 128, 16, 24, true, 0}, Case{1, 256, 128, 8, 16, true, 4}}) {
    const Conv2dSpec sw = spec_of(c, false, true), sd = spec_of(c, false, false);
    const Data d = data_for(sw, 5);
    const std::vector<double> want = conv_nhwc_ref(sw, d.x, d.w, &d.b, nullptr);
    const double ew = max_error(run(Conv2d(sw, d.wt, d.bt), d, false), want);
    const double ed = max_error(run(Conv2d(sd, d.wt, d.bt), d, false), want);
    INFO("channels " << c.ci << " -> " << c.co << ": max error Winograd " << ew << ", direct " << ed);
    CHECK(ew <= 4 * ed + 1e-7);
    CHECK(ew < 2e-5);  // outputs of order 1
  }
}

TEST_CASE("Winograd Conv2d gives the same bits on 1, 2 and 3 threads", "[kernels][conv2d][winograd]") {
  if (!winograd_here()) return;
  for (const Case& c : {Case{1, 64, 64, 24, 20, true, 8}, Case{1, 128, 64, 9, 16, true, 4}, Case{2, 32, 32, 7, 9, false, 0}})
    for (const bool acc : {false, true}) {
      const Conv2dSpec s = spec_of(c, acc, true);
      INFO("ci " << c.ci << " co " << c.co << " h " << c.h << " acc " << acc);
      check_same_bits_on_threads(s, data_for(s, 9), acc);
    }
}

TEST_CASE("Conv2d without a Winograd kernel for its shape runs the direct one", "[kernels][conv2d][winograd]") {
  // A 1x1 kernel, a stride of 2 and bf16 input have none: the spec's request is a preference.
  Conv2dSpec s = spec_of(Case{1, 16, 16, 6, 6, false, 0}, false, true);
  s.kernel = 1;
  s.padding = 0;
  s.pad_rows = 0;
  const Data d = data_for(spec_of(Case{1, 16, 16, 6, 6, false, 0}, false, true), 3);
  Tensor w1 = Tensor::empty({16, 16, 1, 1});
  std::copy(d.w.begin(), d.w.begin() + 256, w1.f32());
  const Conv2d c(s, w1, Tensor());
  CHECK_FALSE(c.uses_winograd());
  CHECK(c.impl_info().find("wino") == std::string::npos);
}
