// DiT's weight-free pieces against independent values: timestep features (docs/dit.md
// reference numbers), 2-D sin-cos positions (a direct formula), patch (un)folding.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "models/common/embeddings.h"

TEST_CASE("timestep embedding matches diffusers (flip, shift 1)", "[models][embeddings]") {
  std::vector<float> e(256);
  dit::timestep_embedding(500.0, 256, 1.0f, e.data());
  // Reference values for t=500 (docs/dit.md, computed in float64): dims 1, 127, 129, 255.
  // torch (and we) compute t·f_k in float32, so large arguments (dim 129: t·f ≈ 500) carry
  // ~3e-5 of argument rounding; hence the wider margin there.
  CHECK(e[1] == Approx(0.997772).margin(2e-6));
  CHECK(e[127] == Approx(0.998750).margin(2e-6));
  CHECK(e[129] == Approx(0.066711).margin(5e-5));
  CHECK(e[255] == Approx(0.049979).margin(2e-6));
  dit::timestep_embedding(500.0, 256, 0.0f, e.data());  // shift 0 (original DiT) differs
  CHECK(e[1] == Approx(0.945943).margin(2e-6));
  CHECK(e[129] == Approx(0.324334).margin(5e-5));
}

TEST_CASE("2-D sin-cos positions: column half first, rescaled grid", "[models][embeddings]") {
  const int D = 16;
  const int64_t gh = 3, gw = 5;
  const double base = 4;  // sample_size / patch of the model (grid rescaled to it)
  std::vector<float> all(size_t(gh * gw * D)), part(size_t(4 * D));
  dit::pos_embed_2d(D, gh, gw, base, 1.0, 0, gh * gw, all.data());
  dit::pos_embed_2d(D, gh, gw, base, 1.0, 6, 10, part.data());  // a token range gives the same rows
  for (int i = 0; i < 4 * D; ++i) CHECK(part[size_t(i)] == all[size_t(6 * D + i)]);
  for (int64_t n = 0; n < gh * gw; ++n) {
    const double i = double(n / gw) / (double(gh) / base), j = double(n % gw) / (double(gw) / base);
    for (int half = 0; half < 2; ++half) {
      const double pos = half == 0 ? j : i;  // first half encodes the column
      for (int k = 0; k < D / 4; ++k) {
        const double w = 1.0 / std::pow(10000.0, double(k) / (D / 4.0));
        CHECK(all[size_t(n * D + half * D / 2 + k)] == Approx(std::sin(pos * w)).margin(1e-6));
        CHECK(all[size_t(n * D + half * D / 2 + D / 4 + k)] == Approx(std::cos(pos * w)).margin(1e-6));
      }
    }
  }
}

TEST_CASE("patchify / unpatchify are exact inverses for any token range", "[models][embeddings]") {
  const int64_t B = 2, C = 3, p = 2, gh = 3, gw = 4, H = gh * p, W = gw * p;
  std::vector<float> x(size_t(B * C * H * W));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  // patchify rows are (c, ki, kj); feed them to unpatchify laid out as (pi, pj, c).
  std::vector<float> rows(size_t(B * gh * gw * C * p * p));
  dit::patchify(x.data(), B, C, H, W, p, 0, gh * gw, rows.data());
  std::vector<float> tok(rows.size());
  for (int64_t t = 0; t < B * gh * gw; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t q = 0; q < p * p; ++q) tok[size_t(t * C * p * p + q * C + c)] = rows[size_t(t * C * p * p + c * p * p + q)];
  std::vector<float> back(x.size(), -1);
  dit::unpatchify(tok.data(), B, gh, gw, p, C, C, back.data());
  CHECK(back == x);
  // A sub-range equals the same rows of the full patchify.
  std::vector<float> sub(size_t(B * 5 * C * p * p));
  dit::patchify(x.data(), B, C, H, W, p, 3, 8, sub.data());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t e = 0; e < C * p * p; ++e)
        CHECK(sub[size_t((b * 5 + t) * C * p * p + e)] == rows[size_t((b * gh * gw + 3 + t) * C * p * p + e)]);
}
