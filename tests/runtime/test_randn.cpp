#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "runtime/randn.h"
#include "runtime/safetensors.h"
#include "tests/runtime/io_test_util.h"

using namespace dit;
using Catch::Matchers::Contains;

namespace {

// Compares torch_randn(seed, shape) with the tensor `randn` of a golden file made by torch.
void check_golden(const std::string& file, uint64_t seed, const Shape& shape) {
  const std::string path = std::string(DIT_TEST_DATA) + "/golden/" + file;
  Tensor want = SafeTensorsFile::open(path)->get("randn");
  REQUIRE(want.shape() == shape);
  Tensor got = torch_randn(seed, shape);
  REQUIRE(got.shape() == shape);
  double max_diff = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double d = std::fabs(double(got.f32()[i]) - double(want.f32()[i]));
    // std::max(acc, NaN) keeps acc: count NaN/Inf as an infinite difference.
    max_diff = std::isfinite(d) ? std::max(max_diff, d) : INFINITY;
    if (!std::isfinite(max_diff)) break;
  }
  INFO(file << ": max abs difference " << max_diff);
  CHECK(max_diff <= 1e-6);
}

}  // namespace

TEST_CASE("torch_randn matches torch's CPU generator", "[io][randn]") {
  check_golden("randn.seed0.shape1x4x8x8.safetensors", 0, {1, 4, 8, 8});
  check_golden("randn.seed42.shape1x4x32x32.safetensors", 42, {1, 4, 32, 32});
  check_golden("randn.seed5.shape1x4x3x5.safetensors", 5, {1, 4, 3, 5});  // 60: not a multiple of 16
  check_golden("randn.seed123456789.shape1x4x32x32.safetensors", 123456789, {1, 4, 32, 32});
  check_golden("randn.seed3.shape1x4x17x13.safetensors", 3, {1, 4, 17, 13});  // 884 = 55*16 + 4
  // 64-bit seeds: torch uses the low 32 bits (2^40 + 5 -> 5 would differ from seed 0 etc.).
  check_golden("randn.seed1099511627781.shape1x4x8x8.safetensors", 1099511627781ull, {1, 4, 8, 8});
  check_golden("randn.seedmax.shape2x16.safetensors", 18446744073709551615ull, {2, 16});
}

TEST_CASE("torch_randn is deterministic and seed dependent", "[io][randn]") {
  Tensor a = torch_randn(7, Shape{64});
  Tensor b = torch_randn(7, Shape{64});
  Tensor c = torch_randn(8, Shape{64});
  CHECK(std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
  CHECK(std::memcmp(a.data(), c.data(), a.nbytes()) != 0);
  double mean = 0;
  Tensor big = torch_randn(1, Shape{100000});
  for (int64_t i = 0; i < big.numel(); ++i) mean += big.f32()[i];
  CHECK(std::fabs(mean / big.numel()) < 0.02);
}

TEST_CASE("torch_randn rejects fewer than 16 elements", "[io][randn]") {
  CHECK_THAT(dit_test::error_of([] { torch_randn(0, Shape{3, 5}); }), Contains("15") && Contains(">= 16"));
  float buf[4];
  CHECK_THAT(dit_test::error_of([&] { torch_randn(0, buf, 4); }), Contains(">= 16"));
}
