// Attention with an additive bias (AttnBias): key (padding mask), head ([H, Lq, Lk]) and rel
// (diagonals, T5) terms, against a naive softmax attention in double, f32 and bf16 compute.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/compute_types.h"
#include "kernel_test_util.h"
#include "runtime/attention.h"
#include "runtime/attention_roles.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

using namespace dit;

namespace {

struct Problem {
  int64_t B = 2, H = 3, Tq = 1, Tk = 1, D = 8;
  float scale = 0;
  std::vector<float> q, k, v;             // dense [B, H, T, D]
  std::vector<float> key, head, rel;      // empty = not used
};

// softmax(q·k·scale + (head + key))·v in double; -FLT_MAX-ish logits handled like torch
// (exp underflows to 0; a row of equal masked logits averages V).
std::vector<double> naive(const Problem& p, bool bf16, std::vector<double>* lse = nullptr) {
  auto rd = [&](float x) { return bf16 ? double(bf16_to_f32(f32_to_bf16(x))) : double(x); };
  const double scale = p.scale != 0 ? p.scale : 1.0 / std::sqrt(double(p.D));
  std::vector<double> out(p.B * p.H * p.Tq * p.D, 0.0), logit(p.Tk);
  if (lse) lse->assign(p.B * p.H * p.Tq, 0.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.Tq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < p.Tk; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < p.D; ++d)
            acc += rd(p.q[((b * p.H + h) * p.Tq + i) * p.D + d]) * rd(p.k[((b * p.H + h) * p.Tk + j) * p.D + d]);
          float bias = 0.f;  // the f32 sum head + key, as the kernel forms it
          if (!p.head.empty()) bias = p.head[(h * p.Tq + i) * p.Tk + j];
          if (!p.rel.empty()) bias = p.rel[h * (p.Tq + p.Tk - 1) + (j - i) + p.Tq - 1];
          if (!p.key.empty()) bias = bias + p.key[b * p.Tk + j];
          logit[j] = std::max(double(float(acc * scale)) + double(bias), -double(FLT_MAX));
          mx = std::max(mx, logit[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < p.Tk; ++j) sum += std::exp(logit[j] - mx);
        for (int64_t j = 0; j < p.Tk; ++j) {
          const double w = std::exp(logit[j] - mx) / sum;
          for (int64_t d = 0; d < p.D; ++d)
            out[((b * p.H + h) * p.Tq + i) * p.D + d] += w * rd(p.v[((b * p.H + h) * p.Tk + j) * p.D + d]);
        }
        if (lse) (*lse)[(b * p.H + h) * p.Tq + i] = mx + std::log(sum);
      }
  return out;
}

Problem make(int64_t Tq, int64_t Tk, int64_t D, uint32_t seed) {
  Problem p;
  p.Tq = Tq;
  p.Tk = Tk;
  p.D = D;
  p.q = kt::randv(p.B * p.H * Tq * D, seed, -1.f, 1.f);
  p.k = kt::randv(p.B * p.H * Tk * D, seed + 1, -1.f, 1.f);
  p.v = kt::randv(p.B * p.H * Tk * D, seed + 2, -1.f, 1.f);
  return p;
}

std::vector<float> run(const Problem& p, DType compute, int64_t qblock, int64_t kvblock, std::vector<float>* lse = nullptr,
                       bool use_bias = true) {
  AttentionSpec s;
  s.batch = p.B;
  s.heads = p.H;
  s.q_len = p.Tq;
  s.kv_len = p.Tk;
  s.head_dim = p.D;
  s.scale = p.scale;
  s.compute = compute;
  s.q_block = qblock;
  s.kv_block = kvblock;
  Attention a(s);
  AttnBias bias;
  bias.key = p.key.empty() ? nullptr : p.key.data();
  bias.head = p.head.empty() ? nullptr : p.head.data();
  bias.rel = p.rel.empty() ? nullptr : p.rel.data();
  std::vector<float> out(p.B * p.H * p.Tq * p.D, 7.f);
  if (lse) lse->assign(p.B * p.H * p.Tq, 7.f);
  a.run(p.q.data(), p.k.data(), p.v.data(), out.data(), lse ? lse->data() : nullptr, use_bias ? &bias : nullptr);
  return out;
}

void check(const Problem& p, DType compute, int64_t qblock, int64_t kvblock, const std::string& what) {
  const bool bf = compute == DType::BF16;
  std::vector<float> lse;
  const std::vector<float> got = run(p, compute, qblock, kvblock, &lse);
  std::vector<double> want_lse;
  const std::vector<double> want = naive(p, bf, &want_lse);
  const std::string w = what + " " + dtype_name(compute) + " blocks " + std::to_string(qblock) + "/" + std::to_string(kvblock);
  kt::check_close(got.data(), want.data(), want.size(), bf ? 2e-2 : 1e-4, bf ? 1e-2 : 2e-5, w + " out");
  // lse of the biased logits; skip rows whose keys are all masked (lse near -FLT_MAX).
  for (size_t r = 0; r < lse.size(); ++r)
    if (want_lse[r] > -1e30) CHECK(std::fabs(lse[r] - want_lse[r]) <= (bf ? 1e-2 : 1e-4) * (1 + std::fabs(want_lse[r])));
}

// A padding mask like transformers': 0 on kept keys, -FLT_MAX (finfo.min) on the rest.
std::vector<float> padding(int64_t B, int64_t Tk, const std::vector<int64_t>& valid, float masked = -FLT_MAX) {
  std::vector<float> m(B * Tk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Tk; ++j) m[b * Tk + j] = j < valid[b] ? 0.f : masked;
  return m;
}

}  // namespace

TEST_CASE("Attention with a per-key bias (padding mask) matches naive attention", "[kernels][attention][bias]") {
  for (DType c : dit_test::compute_types())
    for (int64_t Tk : {1, 7, 64, 333}) {
      Problem p = make(9, Tk, 16, uint32_t(Tk));
      p.key = padding(p.B, Tk, {std::max<int64_t>(1, Tk / 3), Tk});
      check(p, c, 0, 0, "key Tk " + std::to_string(Tk));
      check(p, c, 4, 16, "key small blocks Tk " + std::to_string(Tk));
      p.key = padding(p.B, Tk, {1, Tk / 2 + 1}, -10000.f);  // PixArt's cross-attention mask
      check(p, c, 4, 16, "key -10000 Tk " + std::to_string(Tk));
    }
}

TEST_CASE("Attention with a [heads, q, kv] bias and with rel diagonals matches naive attention",
          "[kernels][attention][bias]") {
  for (DType c : dit_test::compute_types())
    for (auto [Tq, Tk] : {std::pair<int64_t, int64_t>{5, 5}, {40, 40}, {17, 70}, {70, 17}, {300, 300}}) {
      Problem p = make(Tq, Tk, 12, uint32_t(Tq * 7 + Tk));
      p.scale = 1.0f;  // T5: an explicit 1, not 1/sqrt(d)
      p.head = kt::randv(p.H * Tq * Tk, 77, -3.f, 3.f);
      check(p, c, 0, 0, "head");
      p.key = padding(p.B, Tk, {Tk / 2 + 1, Tk});
      check(p, c, 8, 32, "head+key");
      // rel: the same bias expressed by diagonals equals its full [H, Tq, Tk] form
      p.rel = kt::randv(p.H * (Tq + Tk - 1), 78, -3.f, 3.f);
      std::vector<float> full(p.H * Tq * Tk);
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t i = 0; i < Tq; ++i)
          for (int64_t j = 0; j < Tk; ++j) full[(h * Tq + i) * Tk + j] = p.rel[h * (Tq + Tk - 1) + (j - i) + Tq - 1];
      p.head.clear();
      check(p, c, 8, 32, "rel+key");
      const std::vector<float> by_rel = run(p, c, 8, 32);
      std::swap(p.head, full);
      p.rel.clear();
      CHECK(run(p, c, 8, 32) == by_rel);  // bit for bit
    }
}

TEST_CASE("Attention scale 1.0 is taken as given", "[kernels][attention][bias]") {
  Problem p = make(20, 30, 64, 5);
  p.scale = 1.0f;
  for (DType c : dit_test::compute_types()) check(p, c, 0, 0, "scale 1");
  Problem d = p;
  d.scale = 0;  // default 1/sqrt(64): a different result
  CHECK(run(p, DType::F32, 0, 0) != run(d, DType::F32, 0, 0));
}

TEST_CASE("Attention bias: whole K/V blocks masked by -FLT_MAX give no NaN and weigh exactly 0",
          "[kernels][attention][bias]") {
  for (DType c : dit_test::compute_types()) {
    const int64_t Tq = 24, Tk = 96, kvb = 16;
    Problem p = make(Tq, Tk, 8, 11);
    // batch 0: keys 0..47 masked (three whole leading blocks), batch 1: keys 64..95 masked
    // (two whole trailing blocks) and 0..15 (the first block).
    p.key.assign(p.B * Tk, 0.f);
    for (int64_t j = 0; j < 48; ++j) p.key[j] = -FLT_MAX;
    for (int64_t j = 0; j < 16; ++j) p.key[Tk + j] = -FLT_MAX;
    for (int64_t j = 64; j < Tk; ++j) p.key[Tk + j] = -FLT_MAX;
    // and a head bias that pushes masked sums below -FLT_MAX (would be -inf unclamped)
    p.head.assign(p.H * Tq * Tk, 0.f);
    for (size_t i = 0; i < p.head.size(); ++i) p.head[i] = (i % 3 == 0) ? -3e38f : 0.5f;
    for (int64_t j = 0; j < Tk; ++j)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t h = 0; h < p.H; ++h)
          if (p.key[j] == 0.f && p.key[Tk + j] == 0.f) p.head[(h * Tq + i) * Tk + j] = 0.25f;  // unmasked in both
    const std::vector<float> got = run(p, c, 8, kvb);
    for (float x : got) REQUIRE(std::isfinite(x));
    // Exactly 0 weight: equal to attention over the kept keys only.
    for (int64_t b = 0; b < p.B; ++b) {
      Problem kept = p;
      kept.B = 1;
      std::vector<int64_t> keep;
      for (int64_t j = 0; j < Tk; ++j)
        if (p.key[b * Tk + j] == 0.f) keep.push_back(j);
      kept.Tk = int64_t(keep.size());
      kept.key.clear();
      kept.q.assign(p.q.begin() + b * p.H * Tq * p.D, p.q.begin() + (b + 1) * p.H * Tq * p.D);
      kept.k.clear();
      kept.v.clear();
      kept.head.clear();
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t j : keep)
          for (int64_t d = 0; d < p.D; ++d) {
            kept.k.push_back(p.k[((b * p.H + h) * Tk + j) * p.D + d]);
            kept.v.push_back(p.v[((b * p.H + h) * Tk + j) * p.D + d]);
          }
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t i = 0; i < Tq; ++i)
          for (int64_t j : keep) kept.head.push_back(p.head[(h * Tq + i) * Tk + j]);
      const std::vector<double> want = naive(kept, c == DType::BF16);
      kt::check_close(got.data() + b * p.H * Tq * p.D, want.data(), want.size(), c == DType::BF16 ? 2e-2 : 1e-4,
                      c == DType::BF16 ? 1e-2 : 2e-5, std::string("kept keys only, batch ") + std::to_string(b));
    }
  }
}

TEST_CASE("Attention bias: a row with every key masked averages V, like torch", "[kernels][attention][bias]") {
  Problem p = make(6, 40, 8, 21);
  p.key = padding(p.B, 40, {0, 40});  // batch 0: nothing kept
  const std::vector<float> got = run(p, DType::F32, 0, 16);
  for (float x : got) REQUIRE(std::isfinite(x));
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t d = 0; d < p.D; ++d) {
      double mean = 0;
      for (int64_t j = 0; j < 40; ++j) mean += p.v[(h * 40 + j) * p.D + d] / 40.0;
      CHECK(std::fabs(got[(h * p.Tq + 3) * p.D + d] - mean) < 1e-5);
    }
}

TEST_CASE("Attention with a zero bias equals attention without one, bit for bit", "[kernels][attention][bias]") {
  // bf16 adds the bias as bias/scale to the unscaled logits: 1/sqrt(72) is not a power of two
  for (const float scale : {0.f, 0.117851130f})
    for (DType c : dit_test::compute_types()) {
      Problem p = make(33, 77, 16, 3);
      p.scale = scale;
      p.key.assign(p.B * 77, 0.f);
      const std::vector<float> with = run(p, c, 8, 16), without = run(p, c, 8, 16, nullptr, false);
      CHECK(with == without);
      Problem e = p;
      e.key.clear();
      CHECK(run(e, c, 8, 16) == without);  // an AttnBias with no pointers adds nothing
    }
  Problem p = make(4, 4, 8, 1);
  p.head.assign(p.H * 16, 0.f);
  p.rel.assign(p.H * 7, 0.f);
  CHECK_THROWS_AS(run(p, DType::F32, 0, 0), dit::Error);  // head and rel together
}

TEST_CASE("Cross-attention in bf16: q, k, v and out in bf16 give the f32 path's bits, rounded",
          "[kernels][attention][bias][bf16]") {
  // PixArt's projections write q, k and v in bf16 and its output projection reads the output
  // so (CrossAttention::io_dtype): the kernels round q, k, v to bf16 anyway, so the output must
  // be the f32-input output rounded, padding bias included. A rank without image tokens
  // writes nothing.
  if (!dit_test::bf16_available()) return;
  const int64_t B = 2, T = 37, L = 11, H = 3, D = 16;
  auto q = kt::randv(B * T * H * D, 61, -2.f, 2.f), k = kt::randv(B * L * H * D, 62, -2.f, 2.f),
       v = kt::randv(B * L * H * D, 63);
  std::vector<float> bias(B * L, 0.f);
  for (int64_t j = 7; j < L; ++j) bias[size_t(L + j)] = -10000.f;  // the second caption is padded
  auto round16 = [](const std::vector<float>& x) {
    std::vector<uint16_t> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = f32_to_bf16(x[i]);
    return y;
  };
  const std::vector<uint16_t> q16 = round16(q), k16 = round16(k), v16 = round16(v);
  auto cross = make_local_cross_attention();
  cross->prepare(CrossAttentionShape{B, T, L, H, D, DType::BF16});
  REQUIRE(cross->io_dtype() == DType::BF16);
  std::vector<float> want(size_t(B * T * H * D), NAN);
  cross->forward(q.data(), k.data(), v.data(), bias.data(), want.data());
  std::vector<uint16_t> got(want.size(), 0x7fc1);
  cross->forward(q16.data(), k16.data(), v16.data(), bias.data(), got.data());
  size_t off = 0;
  for (size_t i = 0; i < want.size(); ++i) off += got[i] != f32_to_bf16(want[i]);
  CHECK(off == 0);

  auto f32 = make_local_cross_attention();
  f32->prepare(CrossAttentionShape{B, T, L, H, D, DType::F32});
  CHECK(f32->io_dtype() == DType::F32);
  CHECK_THROWS_WITH(f32->forward(q16.data(), k16.data(), v16.data(), bias.data(), got.data()),
                    Catch::Contains("need bf16 compute"));
  auto none = make_local_cross_attention();  // a rank holding no image tokens
  none->prepare(CrossAttentionShape{B, 0, L, H, D, DType::BF16});
  std::vector<uint16_t> untouched(4, 0x1234);
  none->forward(q16.data(), k16.data(), v16.data(), bias.data(), untouched.data());
  CHECK(untouched == std::vector<uint16_t>(4, 0x1234));
}

TEST_CASE("Attention bias: key_stride reads the first kv_len of longer key rows, with the bits of compact rows",
          "[kernels][attention][bias]") {
  for (DType c : dit_test::compute_types()) {
    Problem p = make(9, 13, 16, 71);
    p.key = padding(p.B, 13, {5, 13}, -10000.f);
    const std::vector<float> want = run(p, c, 4, 8);
    // The same bias in rows of 20, the 7 extra entries garbage (never read).
    std::vector<float> wide(size_t(p.B * 20), 1e30f);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t j = 0; j < 13; ++j) wide[size_t(b * 20 + j)] = p.key[size_t(b * 13 + j)];
    AttentionSpec s;
    s.batch = p.B;
    s.heads = p.H;
    s.q_len = 9;
    s.kv_len = 13;
    s.head_dim = 16;
    s.compute = c;
    s.q_block = 4;
    s.kv_block = 8;
    Attention a(s);
    AttnBias bias;
    bias.key = wide.data();
    bias.key_stride = 20;
    std::vector<float> got(want.size(), 7.f);
    a.run(p.q.data(), p.k.data(), p.v.data(), got.data(), nullptr, &bias);
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
    bias.key_stride = 12;  // shorter than kv_len: refused
    CHECK_THROWS_WITH(a.run(p.q.data(), p.k.data(), p.v.data(), got.data(), nullptr, &bias),
                      Catch::Contains("key_stride 12 is shorter than kv_len"));
  }
}

TEST_CASE("Cross-attention over the first keys only (use_keys) equals attending to all when the rest are padded",
          "[kernels][attention][bias]") {
  // PixArt skips the text padding past the batch's last unmasked token: those keys carry
  // -10000 on every item, so they weigh nothing. Attending to all of them or to the first
  // `used` gives the same output; use_keys(all) attends to all again.
  const int64_t B = 2, T = 37, L = 29, H = 3, D = 16;
  for (DType c : dit_test::compute_types()) {
    auto q = kt::randv(B * T * H * D, 81, -2.f, 2.f), k = kt::randv(B * L * H * D, 82, -2.f, 2.f),
         v = kt::randv(B * L * H * D, 83);
    for (const int64_t used : {int64_t(1), int64_t(6), int64_t(17)}) {
      std::vector<float> bias(B * L, 0.f);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = (b == 0 ? used : std::min<int64_t>(used, 3)); j < L; ++j) bias[size_t(b * L + j)] = -10000.f;
      auto cross = make_local_cross_attention();
      cross->prepare(CrossAttentionShape{B, T, L, H, D, c});
      std::vector<float> all(size_t(B * T * H * D), NAN), first(all.size(), NAN), again(all.size(), NAN);
      cross->forward(q.data(), k.data(), v.data(), bias.data(), all.data());
      cross->use_keys(used);
      cross->forward(q.data(), k.data(), v.data(), bias.data(), first.data());
      cross->use_keys(L);
      cross->forward(q.data(), k.data(), v.data(), bias.data(), again.data());
      INFO(dtype_name(c) << ", " << used << " of " << L << " keys");
      double worst = 0;
      for (size_t i = 0; i < all.size(); ++i) worst = std::max(worst, double(std::fabs(first[i] - all[i])));
      CHECK(worst <= 1e-6);  // (0 here: the skipped keys' weights are exact zeros)
      CHECK(std::memcmp(again.data(), all.data(), all.size() * 4) == 0);
      // Garbage in the skipped keys changes nothing once they are skipped.
      std::vector<float> k2 = k, v2 = v;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = used; j < L; ++j)
          for (int64_t e = 0; e < H * D; ++e) k2[size_t((b * L + j) * H * D + e)] = v2[size_t((b * L + j) * H * D + e)] = 1e30f;
      cross->use_keys(used);
      std::vector<float> skipped(all.size(), NAN);
      cross->forward(q.data(), k2.data(), v2.data(), bias.data(), skipped.data());
      CHECK(std::memcmp(skipped.data(), first.data(), all.size() * 4) == 0);
    }
    auto cross = make_local_cross_attention();
    cross->prepare(CrossAttentionShape{B, T, L, H, D, c});
    CHECK_THROWS_WITH(cross->use_keys(0), Catch::Contains("0 keys used of 29 prepared"));
    CHECK_THROWS_WITH(cross->use_keys(L + 1), Catch::Contains("30 keys used of 29 prepared"));
  }
}
