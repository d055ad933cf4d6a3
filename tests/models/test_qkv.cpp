// QkvLinear (models/common/qkv.h): bf16 q, k, v are the f32 ones rounded to nearest even, for
// the fused projection and the split one (three matmuls writing column blocks); a bf16 x gives
// the f32 x's bits.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "models/common/qkv.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/compute_types.h"

using namespace dit;

namespace {

Tensor random(std::vector<int64_t> shape, unsigned seed, float scale) {
  Tensor t = Tensor::empty(shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = u(rng);
  return t;
}

}  // namespace

TEST_CASE("QkvLinear with bf16 output: the f32 output's bits rounded, fused and split", "[models][qkv][bf16]") {
  if (!dit_test::bf16_available()) return;
  const int64_t rows = 37, D = 48;
  const Tensor x = random({rows, D}, 1, 1.f);
  const Tensor wq = random({D, D}, 2, 0.3f), wk = random({D, D}, 3, 0.3f), wv = random({D, D}, 4, 0.3f);
  const Tensor bq = random({D}, 5, 0.1f), bk = random({D}, 6, 0.1f), bv = random({D}, 7, 0.1f);
  QkvWeights split;
  split.q = LinearWeight::prepare(wq, bq, DType::BF16);
  split.k = LinearWeight::prepare(wk, bk, DType::BF16);
  split.v = LinearWeight::prepare(wv, bv, DType::BF16);
  QkvWeights fused;
  Tensor b3 = Tensor::empty({3 * D});
  for (int64_t i = 0; i < D; ++i) {
    b3.f32()[i] = bq.f32()[i];
    b3.f32()[D + i] = bk.f32()[i];
    b3.f32()[2 * D + i] = bv.f32()[i];
  }
  fused.qkv = LinearWeight::prepare(concat_rows({wq, wk, wv}), b3, DType::BF16);
  for (const QkvWeights* w : {&split, &fused}) {
    INFO((w->fused() ? "fused" : "split"));
    std::vector<float> y(size_t(rows * 3 * D));
    QkvLinear(*w, rows).run(x.f32(), y.data());
    std::vector<uint16_t> y16(y.size(), 0x5555);
    QkvLinear bf(*w, rows, DType::BF16);
    bf.run(x.f32(), y16.data());
    size_t wrong = 0;
    for (size_t i = 0; i < y.size(); ++i) wrong += y16[i] != f32_to_bf16(y[i]);
    CHECK(wrong == 0);
    CHECK_THROWS_WITH(bf.run(x.f32(), y.data()), Catch::Contains("f32 q, k, v, made for f32 and bf16"));
    CHECK_THROWS_WITH(QkvLinear(*w, rows).run(x.f32(), y16.data()),
                      Catch::Contains("bf16 q, k, v, made for f32 and f32"));

    // x given in bf16 (a norm's bf16 output): what the f32 x is rounded to inside, so the same
    // bits in both output types.
    std::vector<uint16_t> x16(size_t(rows * D));
    for (size_t i = 0; i < x16.size(); ++i) x16[i] = f32_to_bf16(x.f32()[i]);
    std::vector<uint16_t> z16(y.size(), 0x5555);
    QkvLinear(*w, rows, DType::BF16, DType::BF16).run(x16.data(), z16.data());
    CHECK(z16 == y16);
    std::vector<float> z(y.size(), 7.f);
    QkvLinear(*w, rows, DType::F32, DType::BF16).run(x16.data(), z.data());
    CHECK(z == y);
    CHECK_THROWS_WITH(bf.run(x16.data(), y16.data()),
                      Catch::Contains("bf16 x and bf16 q, k, v, made for f32 and bf16"));
  }
  // A bf16 x needs bf16 compute.
  QkvWeights f32w;
  f32w.q = LinearWeight::prepare(wq, bq, DType::F32);
  f32w.k = LinearWeight::prepare(wk, bk, DType::F32);
  f32w.v = LinearWeight::prepare(wv, bv, DType::F32);
  CHECK_THROWS_WITH(QkvLinear(f32w, rows, DType::F32, DType::BF16), Catch::Contains("needs bf16 compute"));
}
