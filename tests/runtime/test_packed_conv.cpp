// Convolution weights kept packed (runtime/conv2d.h, runtime/packed_weights.h): a Conv2d reading
// its weight from the machine's packed entry gives the bits of one that reorders a private copy;
// the entry is made once per weight and layout, and the next convolution of it (another band's
// rows, another process) maps it instead of reordering; an unusable optional directory falls
// back to the private copy (an f32 Winograd convolution to the direct form, whose weight transform
// is oneDNN's slow one; the bf16 Winograd form transforms its own quickly).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <vector>

#include "io_test_util.h"
#include "packed_test_util.h"
#include "runtime/conv2d.h"
#include "runtime/engine.h"
#include "runtime/packed_weights.h"
#include "tests/compute_types.h"

using namespace dit;
namespace fs = std::filesystem;

// (A named namespace: the test files are compiled several to a translation unit.)
namespace packed_conv_test {

// A channels-last convolution as the VAE decoder makes them: `rows` rows (with the halo rows of
// a 3x3 kernel as its padding above and below), 9 wide.
Conv2dSpec vae_conv(int64_t ci, int64_t co, int64_t k, int64_t rows, DType compute) {
  Conv2dSpec s;
  s.in_channels = ci;
  s.out_channels = co;
  s.kernel = k;
  s.padding = k / 2;
  s.height = k == 3 ? rows + 2 : rows;
  s.pad_rows = 0;
  s.width = 9;
  s.nhwc = true;
  s.compute = compute;
  return s;
}

// y of `c` over a random x (f32).
std::vector<float> run_conv(const Conv2d& c) {
  const Conv2dSpec& s = c.spec();
  const Tensor x = dit_test::random_tensor({s.height * s.width * s.in_channels}, 7);
  std::vector<float> y(size_t(s.out_height() * s.out_width() * s.out_channels));
  c.run(x.f32(), y.data());
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

}  // namespace packed_conv_test

using packed_conv_test::run_conv;
using packed_conv_test::same_bits;
using packed_conv_test::vae_conv;

TEST_CASE("packed weights: a convolution reading its packed entry gives the private reorder's bits, made once",
          "[runtime][packed][conv2d]") {
  for (const DType compute : dit_test::compute_types())
    for (const int64_t k : {3, 1})
    for (const bool winograd : {false, true}) {  // the Winograd forms' weight layouts (3x3) are kept alike
      if (winograd && k != 3) continue;
      INFO(dtype_name(compute) << ", " << k << "x" << k << (winograd ? ", Winograd" : ""));
      dit_test::TempDir d;
      const std::string pd = fs::canonical(d.path()).string() + "/packed";
      const Tensor w = dit_test::random_tensor({48, 32, k, k}, 3, DType::F32, 0.2f), b = dit_test::random_tensor({48}, 4);
      Conv2dSpec s = vae_conv(32, 48, k, 6, compute);
      s.winograd = winograd;
      const Conv2d mine(s, w, b);
      if (winograd && !mine.uses_winograd()) WARN("no Winograd kernel on this CPU: its weight layout not checked");
      const std::vector<float> want = run_conv(mine);
      CHECK_FALSE(mine.weight_shared());

      auto dir = std::make_shared<PackedWeightDir>(pd, false);
      {
        const Conv2d c(s, w, b, nullptr, PackedSource(dir, "conv"));
        CHECK(c.weight_shared());
        CHECK(dir->made() == 1);
        CHECK(dit_test::packed_entries(pd) == 1);
        CHECK(same_bits(run_conv(c), want));
        // Another band's rows in the same layout: the same entry, one mapping of it.
        Conv2dSpec band_spec = vae_conv(32, 48, k, 3, compute);
        band_spec.winograd = winograd;
        const Conv2d band(band_spec, w, b, nullptr, PackedSource(dir, "conv"));
        CHECK(band.weight_shared());
        CHECK(dir->made() == 1);
        CHECK(dit_test::mappings_of(pd) == 1);
        CHECK(same_bits(run_conv(band), run_conv(Conv2d(band.spec(), w, b))));
      }
      CHECK(dit_test::mappings_of(pd) == 0);  // unmapped with its last reader
      // Another process (its own directory object) maps it: nothing made, the same bits, and the
      // weight it was made from is not read (garbage in its place changes nothing).
      auto other = std::make_shared<PackedWeightDir>(pd, false);
      const Tensor garbage = dit_test::random_tensor({48, 32, k, k}, 99);
      const Conv2d c(s, garbage, b, nullptr, PackedSource(other, "conv"));
      CHECK(other->made() == 0);
      CHECK(same_bits(run_conv(c), want));
      // Another key (another weight) is an entry of its own.
      const Conv2d c2(s, garbage, b, nullptr, PackedSource(other, "conv2"));
      CHECK(other->made() == 1);
      CHECK(dit_test::packed_entries(pd) == 2);
      CHECK(same_bits(run_conv(c2), run_conv(Conv2d(s, garbage, b))));
    }
}

TEST_CASE("packed weights: a convolution over an unusable optional directory reorders a private copy",
          "[runtime][packed][conv2d]") {
  dit_test::TempDir d;
  dit_test::write_bytes(d.file("file"), "x");
  const std::string bad = d.file("file") + "/packed";  // under a regular file: cannot be created
  const Tensor w = dit_test::random_tensor({16, 8, 3, 3}, 3, DType::F32, 0.2f), b = dit_test::random_tensor({16}, 4);
  const Conv2dSpec s = vae_conv(8, 16, 3, 4, DType::F32);
  const Conv2d c(s, w, b, nullptr, PackedSource(std::make_shared<PackedWeightDir>(bad, true), "conv"));
  CHECK_FALSE(c.weight_shared());
  CHECK(same_bits(run_conv(c), run_conv(Conv2d(s, w, b))));
  const std::string e = dit_test::error_of(
      [&] { Conv2d(s, w, b, nullptr, PackedSource(std::make_shared<PackedWeightDir>(bad, false), "conv")); });
  CHECK(e.find(bad) != std::string::npos);
  // Winograd asked for over that directory: the direct form, not a private transform into its layout.
  Conv2dSpec sw = vae_conv(16, 16, 3, 4, DType::F32);
  sw.winograd = true;
  const Tensor w16 = dit_test::random_tensor({16, 16, 3, 3}, 5, DType::F32, 0.2f);
  const Conv2d cw(sw, w16, b, nullptr, PackedSource(std::make_shared<PackedWeightDir>(bad, true), "conv"));
  CHECK_FALSE(cw.uses_winograd());
  CHECK_FALSE(cw.weight_shared());
  Conv2dSpec sd = sw;
  sd.winograd = false;
  CHECK(same_bits(run_conv(cw), run_conv(Conv2d(sd, w16, b))));
  // bf16's Winograd form transforms its weight quickly: a private copy in its layout.
  if (!compute_supported(DType::BF16)) return;
  Conv2dSpec sb = sw;
  sb.compute = DType::BF16;
  const Conv2d cb(sb, w16, b, nullptr, PackedSource(std::make_shared<PackedWeightDir>(bad, true), "conv"));
  CHECK(cb.uses_winograd());
  CHECK_FALSE(cb.weight_shared());
  CHECK(same_bits(run_conv(cb), run_conv(Conv2d(sb, w16, b))));
}
