#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "tests/compute_types.h"
#include "kernel_test_util.h"
#include "runtime/attention.h"
#include "runtime/dtype.h"
#include "runtime/engine.h"
#include "runtime/attention_roles.h"

using namespace dit;

namespace {

int64_t extent(const AttnLayout& l, int64_t B, int64_t H, int64_t T, int64_t D) {
  return (B - 1) * l.batch_stride + (H - 1) * l.head_stride + (T - 1) * l.token_stride + D;
}

// Naive softmax attention in double; out in `ol` layout, lse [B, H, Tq].
void attention_ref(const AttentionSpec& s, const float* q, const float* k, const float* v, const AttnLayout& ql,
                   const AttnLayout& kl, const AttnLayout& vl, std::vector<double>& out, std::vector<double>& lse,
                   bool round_bf16 = false) {
  const int64_t D = s.head_dim;
  const double scale = s.scale != 0 ? s.scale : 1.0 / std::sqrt(double(D));
  auto rd = [&](float x) { return round_bf16 ? double(bf16_to_f32(f32_to_bf16(x))) : double(x); };
  out.assign(s.batch * s.heads * s.q_len * D, 0.0);
  lse.assign(s.batch * s.heads * s.q_len, 0.0);
  std::vector<double> logit(s.kv_len);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.q_len; ++i) {
        const float* qp = q + b * ql.batch_stride + h * ql.head_stride + i * ql.token_stride;
        double mx = -1e300;
        for (int64_t j = 0; j < s.kv_len; ++j) {
          const float* kp = k + b * kl.batch_stride + h * kl.head_stride + j * kl.token_stride;
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += rd(qp[d]) * rd(kp[d]);
          logit[j] = acc * scale;
          mx = std::max(mx, logit[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < s.kv_len; ++j) sum += std::exp(logit[j] - mx);
        double* o = out.data() + ((b * s.heads + h) * s.q_len + i) * D;  // dense bhtd
        for (int64_t j = 0; j < s.kv_len; ++j) {
          const double p = std::exp(logit[j] - mx) / sum;
          const float* vp = v + b * vl.batch_stride + h * vl.head_stride + j * vl.token_stride;
          for (int64_t d = 0; d < D; ++d) o[d] += p * rd(vp[d]);
        }
        lse[(b * s.heads + h) * s.q_len + i] = mx + std::log(sum);
      }
}

// Gathers a strided output into dense bhtd.
std::vector<float> gather(const AttentionSpec& s, const float* out, const AttnLayout& ol) {
  std::vector<float> r(s.batch * s.heads * s.q_len * s.head_dim);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h)
      for (int64_t i = 0; i < s.q_len; ++i)
        for (int64_t d = 0; d < s.head_dim; ++d)
          r[((b * s.heads + h) * s.q_len + i) * s.head_dim + d] =
              out[b * ol.batch_stride + h * ol.head_stride + i * ol.token_stride + d];
  return r;
}

AttentionSpec spec_of(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, DType compute) {
  AttentionSpec s;
  s.batch = B;
  s.heads = H;
  s.q_len = Tq;
  s.kv_len = Tk;
  s.head_dim = D;
  s.compute = compute;
  return s;
}

// fused: q, k, v read from one [B, T, 3, H, D] buffer, out [B, T, H, D].
// bf16's forms (AttentionSpec): the scale in Q·Kᵀ; Q and K zero-padded (pad_qk: always; else
// as the runtime chooses on this machine).
struct Bf16Form {
  bool scale_in_qk = false, pad_qk = false;
};

void check_attention(int64_t B, int64_t H, int64_t Tq, int64_t Tk, int64_t D, bool fused, DType compute,
                     int64_t qblock = 0, int64_t kvblock = 0, float scale = 0, float range = 1.f,
                     Bf16Form form = {}) {
  AttentionSpec s = spec_of(B, H, Tq, Tk, D, compute);
  s.bf16_scale_in_qk = form.scale_in_qk;
  s.bf16_qk_pad = form.pad_qk ? QkPad::On : QkPad::Auto;
  s.q_block = qblock;
  s.kv_block = kvblock;
  s.scale = scale;
  AttnLayout ql, kl, vl, ol;
  std::vector<float> qb, kb, vb;
  const float *q, *k, *v;
  const uint32_t seed = uint32_t(B * 7 + H * 11 + Tq * 13 + Tk * 17 + D * 19 + fused);
  if (fused) {
    REQUIRE(Tq == Tk);
    ql = kl = vl = AttnLayout::bthd(Tq, D, H, 3 * H * D);
    ol = AttnLayout::bthd(Tq, D, H, H * D);
    qb = kt::randv(B * Tq * 3 * H * D, seed, -range, range);
    q = qb.data();
    k = qb.data() + H * D;
    v = qb.data() + 2 * H * D;
  } else {
    ql = AttnLayout::bhtd(H, Tq, D);
    kl = vl = AttnLayout::bhtd(H, Tk, D);
    ol = AttnLayout::bhtd(H, Tq, D);
    qb = kt::randv(extent(ql, B, H, Tq, D), seed, -range, range);
    kb = kt::randv(extent(kl, B, H, Tk, D), seed + 1, -range, range);
    vb = kt::randv(extent(vl, B, H, Tk, D), seed + 2, -range, range);
    q = qb.data();
    k = kb.data();
    v = vb.data();
  }
  s.q = ql;
  s.k = kl;
  s.v = vl;
  s.out = ol;
  Attention attn(s);
  std::vector<float> out(extent(ol, B, H, Tq, D), 1e30f), lse(B * H * Tq, 1e30f);
  attn.run(q, k, v, out.data(), lse.data());
  std::vector<double> want, want_lse;
  attention_ref(s, q, k, v, ql, kl, vl, want, want_lse, compute == DType::BF16);
  const bool bf = compute == DType::BF16;
  std::ostringstream os;
  os << "attn B" << B << " H" << H << " Tq" << Tq << " Tk" << Tk << " D" << D << " fused" << fused << " "
     << dtype_name(compute) << " blocks " << qblock << "/" << kvblock << (form.scale_in_qk ? " scale in Q·Kᵀ" : "")
     << (form.pad_qk ? " Q, K padded" : "")
     << " impl " << attn.impl_info();
  kt::check_close(gather(s, out.data(), ol).data(), want.data(), want.size(), bf ? 2e-2 : 1e-4, bf ? 1e-2 : 2e-5,
                  os.str() + " out");
  kt::check_close(lse.data(), want_lse.data(), want_lse.size(), bf ? 1e-2 : 1e-5, bf ? 1e-2 : 1e-5,
                  os.str() + " lse");
  // A second run over the same data gives the same values (no state kept between runs).
  std::vector<float> out2(out.size(), 0.f);
  attn.run(q, k, v, out2.data(), nullptr);
  for (int64_t b = 0; b < B; ++b)  // compare only the elements the layout covers
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t idx = b * ol.batch_stride + h * ol.head_stride + i * ol.token_stride + d;
          if (out2[idx] != out[idx]) {
            FAIL_CHECK(os.str() << " rerun differs at " << idx);
            return;
          }
        }
}

}  // namespace

TEST_CASE("Attention matches naive softmax attention (dense)", "[kernels][attention]") {
  for (int64_t D : {8, 72})
    for (int64_t T : {1, 7, 64, 333}) check_attention(2, 3, T, T, D, false, DType::F32);
  for (int64_t D : {8, 72}) {
    check_attention(2, 3, 7, 333, D, false, DType::F32);
    check_attention(2, 3, 333, 64, D, false, DType::F32);
    check_attention(2, 3, 1, 64, D, false, DType::F32);
    check_attention(2, 3, 64, 7, D, false, DType::F32);
  }
}

TEST_CASE("Attention reads a fused QKV buffer in place", "[kernels][attention]") {
  for (int64_t D : {8, 72})
    for (int64_t T : {1, 7, 64, 333}) check_attention(2, 3, T, T, D, true, DType::F32);
}

TEST_CASE("Attention block sizes and tails", "[kernels][attention]") {
  check_attention(2, 3, 333, 333, 72, true, DType::F32, 16, 32);
  check_attention(1, 2, 100, 250, 8, false, DType::F32, 128, 512);
  check_attention(1, 2, 129, 513, 16, false, DType::F32, 64, 128);
  check_attention(1, 1, 200, 200, 512, false, DType::F32);  // VAE-like single head of 512
  check_attention(1, 2, 70, 2100, 16, false, DType::F32);   // long K/V, dense
  check_attention(1, 2, 2100, 2100, 8, true, DType::F32);   // long K/V from fused QKV: copied dense
  // large logits: the online softmax must stay stable
  check_attention(2, 2, 100, 300, 16, false, DType::F32, 32, 64, 1.0f, 4.f);
}

TEST_CASE("Attention with bf16 compute", "[kernels][attention][bf16]") {
  if (!dit_test::bf16_available()) return;
  for (int64_t T : {1, 7, 64, 333}) check_attention(2, 3, T, T, 72, true, DType::BF16);
  check_attention(2, 3, 7, 333, 8, false, DType::BF16);
  check_attention(2, 3, 333, 64, 72, false, DType::BF16, 32, 64);
}

// The scale as Q·Kᵀ's output scale (how bf16 ran before, kept for dit-kernel-bench to compare)
// matches the reference as well, large logits included.
TEST_CASE("Attention with bf16 compute, the scale in the Q·Kᵀ matmul", "[kernels][attention][bf16]") {
  if (!dit_test::bf16_available()) return;
  const Bf16Form in_qk{true, false};
  check_attention(2, 3, 64, 64, 72, true, DType::BF16, 0, 0, 0, 1.f, in_qk);
  check_attention(2, 3, 333, 64, 72, false, DType::BF16, 32, 64, 0, 1.f, in_qk);
  check_attention(2, 2, 100, 300, 16, false, DType::BF16, 32, 64, 1.0f, 4.f, in_qk);
}

// Q and K with head_dim zero-padded to a multiple of 32 (kept for dit-kernel-bench to compare):
// the reference's result, with tails, small and padded-to-itself head dims, large logits, and
// the scale in either place.
TEST_CASE("Attention with bf16 compute, Q and K zero-padded", "[kernels][attention][bf16]") {
  if (!dit_test::bf16_available()) return;
  const Bf16Form pad{false, true};
  for (int64_t T : {1, 7, 333}) check_attention(2, 3, T, T, 72, true, DType::BF16, 0, 0, 0, 1.f, pad);
  check_attention(2, 3, 7, 333, 8, false, DType::BF16, 0, 0, 0, 1.f, pad);
  check_attention(2, 3, 333, 64, 40, false, DType::BF16, 32, 64, 0, 1.f, pad);
  check_attention(1, 2, 64, 64, 64, true, DType::BF16, 0, 0, 0, 1.f, pad);  // already a multiple
  check_attention(2, 2, 100, 300, 16, false, DType::BF16, 32, 64, 1.0f, 4.f, pad);
  check_attention(2, 3, 64, 64, 72, true, DType::BF16, 0, 0, 0, 1.f, {true, true});
}

// Padded: bf16 inputs give the bits of f32 inputs, with a key bias; the pad adds only exact
// zeros, so the result is the unpadded one up to the order of the f32 sums. Refused where it
// cannot apply.
TEST_CASE("Attention with Q and K padded: bf16 inputs, bias, and where it is refused", "[kernels][attention][bf16]") {
  if (!dit_test::bf16_available()) return;
  const int64_t B = 2, H = 3, T = 300, D = 72;
  std::vector<float> qkv = kt::randv(B * T * 3 * H * D, 43, -2.f, 2.f);
  std::vector<uint16_t> qkv16(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) qkv16[i] = f32_to_bf16(qkv[i]);
  const std::vector<float> key_bias = kt::randv(B * T, 44, -3.f, 0.f);
  AttnBias bias;
  bias.key = key_bias.data();
  AttentionSpec s = spec_of(B, H, T, T, D, DType::BF16);
  s.q = s.k = s.v = AttnLayout::bthd(T, D, H, 3 * H * D);
  s.out = AttnLayout::bthd(T, D, H, H * D);
  s.bf16_qk_pad = QkPad::Off;
  const Attention plain(s);
  s.bf16_qk_pad = QkPad::On;
  const Attention padded(s);
  CHECK(plain.qk_head_dim() == 72);
  CHECK(padded.qk_head_dim() == 96);
  const size_t n = size_t(B * T * H * D);
  std::vector<float> want(n), want_lse(B * H * T), got(n, NAN), got_lse(want_lse.size(), NAN), got32(n, NAN);
  plain.run(qkv.data(), qkv.data() + H * D, qkv.data() + 2 * H * D, want.data(), want_lse.data(), &bias);
  padded.run(qkv16.data(), qkv16.data() + H * D, qkv16.data() + 2 * H * D, got.data(), got_lse.data(), &bias);
  padded.run(qkv.data(), qkv.data() + H * D, qkv.data() + 2 * H * D, got32.data(), nullptr, &bias);
  CHECK(std::memcmp(got.data(), got32.data(), n * 4) == 0);
  kt::check_close(got.data(), want.data(), n, 1e-5, 1e-5, "padded against unpadded, out");
  kt::check_close(got_lse.data(), want_lse.data(), want_lse.size(), 1e-5, 1e-5, "padded against unpadded, lse");
  // f32 has no pad.
  AttentionSpec d = spec_of(1, 1, 4, 4, 8, DType::F32);
  d.bf16_qk_pad = QkPad::On;
  CHECK_THROWS_WITH(Attention(d), Catch::Contains("bf16_qk_pad On needs bf16 compute"));
  d.bf16_qk_pad = QkPad::Auto;
  CHECK(Attention(d).qk_head_dim() == 8);
}

TEST_CASE("parse_qk_pad reads on, off and auto, and names what it refuses", "[kernels][attention]") {
  CHECK(parse_qk_pad("DIT_BF16_QK_PAD", "on") == QkPad::On);
  CHECK(parse_qk_pad("DIT_BF16_QK_PAD", "off") == QkPad::Off);
  CHECK(parse_qk_pad("DIT_BF16_QK_PAD", "auto") == QkPad::Auto);
  CHECK_THROWS_WITH(parse_qk_pad("DIT_BF16_QK_PAD", "yes"),
                    Catch::Contains("DIT_BF16_QK_PAD: 'yes' (expected on, off or auto)"));
}

TEST_CASE("Attention runs with one thread and with more threads than tasks", "[kernels][attention]") {
  const int saved = num_threads();
  set_num_threads(1);
  check_attention(2, 3, 64, 64, 72, true, DType::F32);
  set_num_threads(saved);
  check_attention(1, 1, 7, 7, 8, false, DType::F32);
}

TEST_CASE("Attention's lse is the log-sum-exp of each row's scaled logits", "[kernels][attention]") {
  // Over two kv blocks and a tail (kv_block 64, 130 keys), f32 and bf16, against double.
  std::vector<DType> types = {DType::F32};
  if (dit_test::bf16_available()) types.push_back(DType::BF16);
  const int64_t B = 2, H = 3, Tq = 45, Tk = 130, D = 24;
  auto q = kt::randv(B * H * Tq * D, 1, -2.f, 2.f);
  auto k = kt::randv(B * H * Tk * D, 2, -2.f, 2.f);
  auto v = kt::randv(B * H * Tk * D, 3);
  std::vector<double> want(size_t(B * H * Tq));
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < Tq; ++i) {
      std::vector<double> lg(static_cast<size_t>(Tk));
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < Tk; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) acc += double(q[size_t((bh * Tq + i) * D + d)]) * k[size_t((bh * Tk + j) * D + d)];
        lg[size_t(j)] = acc / std::sqrt(double(D));
        mx = std::max(mx, lg[size_t(j)]);
      }
      for (double x : lg) sum += std::exp(x - mx);
      want[size_t(bh * Tq + i)] = mx + std::log(sum);
    }
  for (DType compute : types) {
    AttentionSpec s = spec_of(B, H, Tq, Tk, D, compute);
    s.kv_block = 64;
    std::vector<float> out(size_t(B * H * Tq * D)), lse(size_t(B * H * Tq), NAN);
    Attention(s).run(q.data(), k.data(), v.data(), out.data(), lse.data());
    // bf16 rounds q and k (2^-9 each): the logits move by up to about 1e-2 here.
    kt::check_close(lse.data(), want.data(), want.size(), compute == DType::BF16 ? 1e-2 : 1e-6,
                    compute == DType::BF16 ? 5e-2 : 1e-5, std::string("lse ") + dtype_name(compute));
  }
}

TEST_CASE("LocalSelfAttention matches naive attention on packed QKV", "[kernels][attention][self_attention]") {
  const int64_t B = 2, T = 77, H = 3, D = 24;
  auto qkv = kt::randv(B * T * 3 * H * D, 5, -1.5f, 1.5f);
  auto sa = make_local_self_attention();
  SelfAttentionShape shp;
  shp.batch = B;
  shp.local_tokens = T;
  shp.heads = H;
  shp.head_dim = D;
  sa->prepare(shp);
  std::vector<float> out(B * T * H * D, 0.f);
  sa->forward(qkv.data(), out.data());
  // naive: unpack into dense and compute
  std::vector<double> want(out.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        auto at = [&](int64_t t, int64_t which, int64_t d) { return double(qkv[(((b * T + t) * 3 + which) * H + h) * D + d]); };
        std::vector<double> lg(T);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += at(i, 0, d) * at(j, 1, d);
          lg[j] = acc / std::sqrt(double(D));
          mx = std::max(mx, lg[j]);
        }
        for (int64_t j = 0; j < T; ++j) sum += std::exp(lg[j] - mx);
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < T; ++j) o += std::exp(lg[j] - mx) / sum * at(j, 2, d);
          want[((b * T + i) * H + h) * D + d] = o;
        }
      }
  kt::check_close(out.data(), want.data(), want.size(), 1e-4, 2e-5, "local self attention");
  CHECK(std::string(sa->name()) == "local");
}

TEST_CASE("Attention implementation names (debug)", "[kernels][attention][.debug]") {
  for (DType c : dit_test::compute_types()) {
    AttentionSpec s;
    s.batch = 2;
    s.heads = 16;
    s.q_len = s.kv_len = 1024;
    s.head_dim = 72;
    s.compute = c;
    s.q = s.k = s.v = AttnLayout::bthd(1024, 72, 16, 3 * 1152);
    Attention a(s);
    std::printf("attention %s: %s\n", dtype_name(c), a.impl_info().c_str());
  }
}

TEST_CASE("Attention::run_dense on attention_to_dense inputs gives run()'s result", "[kernels][attention][dense]") {
  // bf16 also with Q·Kᵀ over a padded head_dim: run() pads its planes, run_dense each block.
  std::vector<std::pair<DType, QkPad>> types = {{DType::F32, QkPad::Off}};
  if (dit_test::bf16_available()) types.insert(types.end(), {{DType::BF16, QkPad::Off}, {DType::BF16, QkPad::On}});
  for (const auto& form : types)
    for (int64_t Tk : {int64_t(7), int64_t(333)}) {
      const DType compute = form.first;  // (not a structured binding: clang 14's lambdas cannot capture one)
      const QkPad pad = form.second;
      const int64_t B = 2, H = 3, Tq = 64, D = 72;
      // Strided inputs as the ring has them: Q from a fused [B, Tq, 3, H, D] buffer, K and V
      // from a [B, Tk, 2, H, D] block.
      const std::vector<float> qkv = kt::randv(B * Tq * 3 * H * D, 11, -1.f, 1.f);
      const std::vector<float> kv = kt::randv(B * Tk * 2 * H * D, 12, -1.f, 1.f);
      AttentionSpec s = spec_of(B, H, Tq, Tk, D, compute);
      s.bf16_qk_pad = pad;
      s.q = AttnLayout::bthd(Tq, D, H, 3 * H * D);
      s.k = s.v = AttnLayout::bthd(Tk, D, H, 2 * H * D);
      s.out = AttnLayout::bthd(Tq, D, H, H * D);
      std::vector<float> want(B * Tq * H * D), want_lse(B * H * Tq);
      Attention strided(s);
      strided.run(qkv.data(), kv.data(), kv.data() + H * D, want.data(), want_lse.data());
      REQUIRE_THROWS_WITH(strided.run_dense(qkv.data(), kv.data(), kv.data(), want.data(), nullptr),
                          Catch::Contains("run_dense needs dense"));
      if (compute == DType::BF16) {  // bf16 reads q in the kernels' form only
        AttentionSpec strided_q = s;
        strided_q.k = strided_q.v = AttnLayout::bhtd(H, Tk, D);
        REQUIRE_THROWS_WITH(Attention(strided_q).run_dense(qkv.data(), kv.data(), kv.data(), want.data(), nullptr),
                            Catch::Contains("run_dense needs dense"));
      }

      const size_t esz = compute == DType::BF16 ? 2 : 4;
      std::vector<char> qd(size_t(B * H * Tq * D) * esz), kd(size_t(B * H * Tk * D) * esz), vd(kd.size());
      attention_to_dense(qkv.data(), s.q, B, H, Tq, D, compute, qd.data());
      attention_to_dense(kv.data(), s.k, B, H, Tk, D, compute, kd.data());
      attention_to_dense(kv.data() + H * D, s.v, B, H, Tk, D, compute, vd.data());
      AttentionSpec sd = s;  // f32: q read in place from the fused buffer; bf16: dense
      if (compute == DType::BF16) sd.q = AttnLayout::bhtd(H, Tq, D);
      sd.k = sd.v = AttnLayout::bhtd(H, Tk, D);
      const void* qin = compute == DType::BF16 ? static_cast<const void*>(qd.data()) : qkv.data();
      std::vector<float> got(want.size(), NAN), got_lse(want_lse.size(), NAN);
      const Attention dense_attn(sd);
      CHECK(dense_attn.qk_head_dim() == (pad == QkPad::On ? 96 : 72));
      dense_attn.run_dense(qin, kd.data(), vd.data(), got.data(), got_lse.data());
      INFO(dtype_name(compute) << " kv " << Tk << (pad == QkPad::On ? " Q and K padded" : ""));
      if (compute == DType::BF16) {  // run() converts to this very form: the same bits
        CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
        CHECK(std::memcmp(got_lse.data(), want_lse.data(), want_lse.size() * 4) == 0);
      } else {  // the same values read with other strides: oneDNN may sum in another order
        kt::check_close(got.data(), want.data(), want.size(), 1e-6, 1e-6, "run_dense f32 out");
        kt::check_close(got_lse.data(), want_lse.data(), want_lse.size(), 1e-6, 1e-6, "run_dense f32 lse");
      }
      // The dense form itself: element (b, h, t, i) of K, as float or rounded to bf16.
      const int64_t b = 1, h = 2, t = Tk - 1, i = 5;
      const float x = kv[size_t(((b * Tk + t) * 2 + 0) * H * D + h * D + i)];
      const int64_t at = ((b * H + h) * Tk + t) * D + i;
      if (compute == DType::BF16)
        CHECK(reinterpret_cast<const uint16_t*>(kd.data())[at] == f32_to_bf16(x));
      else
        CHECK(reinterpret_cast<const float*>(kd.data())[at] == x);
      // Into a longer sequence ([B, H, Tk + 5, D], from token 3): the same rows, shifted, and
      // nothing written outside them.
      std::vector<char> longer(size_t(B * H * (Tk + 5) * D) * esz, char(0x7f));
      attention_to_dense(kv.data(), s.k, B, H, Tk, D, compute, longer.data(), Tk + 5, 3);
      for (int64_t bh = 0; bh < B * H; ++bh) {
        CHECK(std::memcmp(longer.data() + size_t((bh * (Tk + 5) + 3) * D) * esz, kd.data() + size_t(bh * Tk * D) * esz,
                          size_t(Tk * D) * esz) == 0);
        for (int64_t t : {int64_t(0), int64_t(2), Tk + 3, Tk + 4})
          CHECK(longer[size_t((bh * (Tk + 5) + t) * D) * esz] == char(0x7f));
      }
    }
}

TEST_CASE("Attention::phases accounts each part of a run, and reset_phases clears them", "[kernels][attention]") {
  std::vector<DType> types = {DType::F32};
  if (dit_test::bf16_available()) types.push_back(DType::BF16);
  for (DType c : types) {
    const int64_t B = 1, H = 2, T = 600, D = 16;  // two K/V blocks: a rescale happens
    AttentionSpec s = spec_of(B, H, T, T, D, c);
    Attention a(s);
    const std::vector<float> q = kt::randv(B * H * T * D, 31, -1.f, 1.f);
    std::vector<float> out(q.size());
    INFO(dtype_name(c));
    CHECK(a.phases().total() == 0);
    a.run(q.data(), q.data(), q.data(), out.data(), nullptr);
    const AttentionPhases p = a.phases();
    CHECK(p.qk > 0);
    CHECK(p.softmax > 0);
    CHECK(p.pv > 0);
    CHECK(p.rescale > 0);
    CHECK(p.store > 0);
    CHECK((c == DType::BF16) == (p.prepare > 0));  // bf16 converts Q, K, V first; f32 reads them in place
    CHECK(p.total() == Approx(p.qk + p.softmax + p.pv + p.rescale + p.store + p.prepare));
    a.reset_phases();
    CHECK(a.phases().total() == 0);
  }
}

TEST_CASE("Attention::run on bf16 q, k, v gives run()'s bits on their values", "[kernels][attention][bf16]") {
  // run() rounds f32 inputs to bf16 before the kernels; inputs already rounded (a QKV
  // projection writing bf16) must give the same bits, bias and lse included.
  if (!dit_test::bf16_available()) return;
  for (int64_t T : {int64_t(5), int64_t(300)}) {
    const int64_t B = 2, H = 3, D = 72;
    std::vector<float> qkv = kt::randv(B * T * 3 * H * D, 41, -2.f, 2.f);
    std::vector<uint16_t> qkv16(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) qkv16[i] = f32_to_bf16(qkv[i]);
    const std::vector<float> key_bias = kt::randv(B * T, 42, -3.f, 0.f);
    AttentionSpec s = spec_of(B, H, T, T, D, DType::BF16);
    s.q = s.k = s.v = AttnLayout::bthd(T, D, H, 3 * H * D);
    s.out = AttnLayout::bthd(T, D, H, H * D);
    Attention a(s);
    AttnBias bias;
    bias.key = key_bias.data();
    std::vector<float> want(B * T * H * D), want_lse(B * H * T), got(want.size(), NAN), got_lse(want_lse.size(), NAN);
    a.run(qkv.data(), qkv.data() + H * D, qkv.data() + 2 * H * D, want.data(), want_lse.data(), &bias);
    a.run(qkv16.data(), qkv16.data() + H * D, qkv16.data() + 2 * H * D, got.data(), got_lse.data(), &bias);
    INFO("T " << T);
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
    CHECK(std::memcmp(got_lse.data(), want_lse.data(), want_lse.size() * 4) == 0);
    // bf16 output: the f32 output rounded to nearest even, element for element, lse unchanged.
    std::vector<uint16_t> got16(want.size(), 0x7f7f);
    std::fill(got_lse.begin(), got_lse.end(), NAN);
    a.run(qkv16.data(), qkv16.data() + H * D, qkv16.data() + 2 * H * D, got16.data(), got_lse.data(), &bias);
    size_t off = 0;
    for (size_t i = 0; i < want.size(); ++i) off += got16[i] != f32_to_bf16(want[i]);
    CHECK(off == 0);
    CHECK(std::memcmp(got_lse.data(), want_lse.data(), want_lse.size() * 4) == 0);
    // Local self-attention (the role a block calls) writes bf16 on request, the same bits.
    auto sa = make_local_self_attention();
    sa->prepare(SelfAttentionShape{B, T, T, H, D, DType::BF16});
    REQUIRE(sa->out_dtype() == DType::BF16);
    std::vector<uint16_t> sa16(want.size(), 0x7f7f);
    sa->forward(qkv16.data(), sa16.data());
    std::vector<float> sa32(want.size(), NAN);
    sa->forward(qkv16.data(), sa32.data());
    off = 0;
    for (size_t i = 0; i < want.size(); ++i) off += sa16[i] != f32_to_bf16(sa32[i]);
    CHECK(off == 0);
    // The bf16 dense form from bf16 rows: a copy, into a longer sequence at token 2.
    std::vector<uint16_t> dense(size_t(B * H * (T + 3) * D), 0x7f7f);
    attention_to_dense(qkv16.data() + H * D, s.k, B, H, T, D, dense.data(), T + 3, 2);
    size_t wrong = 0;
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t t = 0; t < T + 3; ++t)
        for (int64_t i = 0; i < D; ++i) {
          const uint16_t got16 = dense[size_t((bh * (T + 3) + t) * D + i)];
          const int64_t b = bh / H, h = bh % H;
          const bool inside = t >= 2 && t < T + 2;
          wrong += inside ? got16 != qkv16[size_t(((b * T + t - 2) * 3 + 1) * H * D + h * D + i)] : got16 != 0x7f7f;
        }
    CHECK(wrong == 0);
  }
  // f32 compute takes f32 inputs only.
  Attention f(spec_of(1, 1, 4, 4, 8, DType::F32));
  std::vector<uint16_t> x(32);
  std::vector<float> o(32);
  CHECK_THROWS_WITH(f.run(x.data(), x.data(), x.data(), o.data(), nullptr), Catch::Contains("need bf16 compute"));
  CHECK_THROWS_WITH(f.run(x.data(), x.data(), x.data(), x.data(), nullptr), Catch::Contains("need bf16 compute"));
  auto sa = make_local_self_attention();
  sa->prepare(SelfAttentionShape{1, 4, 4, 1, 8, DType::F32});
  CHECK(sa->out_dtype() == DType::F32);
  std::vector<uint16_t> qkv(96);
  CHECK_THROWS_WITH(sa->forward(qkv.data(), x.data()), Catch::Contains("bf16 output needs bf16 compute"));
}

TEST_CASE("Attention::run_dense_part over successive key sets gives one run over all the keys",
          "[kernels][attention][dense]") {
  // Ring attention's use: the keys come in sets, each from another rank; the rows' online
  // softmax carries over in m, l and the unnormalised output. Sets of whole kv blocks (16 keys
  // here) do exactly the operations of one run over the keys: the same bits. Other splits
  // round differently only in where the blocks end: within 1e-6 in f32; in bf16 each block's
  // probabilities are rounded relative to its own running max, so within bf16's 2^-9 of |v|.
  // bf16 also with Q·Kᵀ over head_dim 24 padded to 32, each block padded as it is read.
  std::vector<std::pair<DType, QkPad>> types = {{DType::F32, QkPad::Off}};
  if (dit_test::bf16_available()) types.insert(types.end(), {{DType::BF16, QkPad::Off}, {DType::BF16, QkPad::On}});
  const int64_t B = 2, H = 3, Tq = 40, D = 24, KB = 16;
  struct Split {
    std::vector<int64_t> sets;
    bool exact;
  };
  for (const auto& form : types)
    for (const Split& split : {Split{{32, 16}, true}, Split{{16, 16, 16}, true}, Split{{48}, true},
                               Split{{20, 28}, false}, Split{{5, 40, 3}, false}}) {
      const DType compute = form.first;  // (not a structured binding: the lambdas below capture it)
      const QkPad pad = form.second;
      int64_t Tk = 0;
      for (int64_t n : split.sets) Tk += n;
      const size_t esz = compute == DType::BF16 ? 2 : 4;
      const std::vector<float> q = kt::randv(B * H * Tq * D, 31, -1.f, 1.f);
      const std::vector<float> k = kt::randv(B * H * Tk * D, 32, -1.f, 1.f), v = kt::randv(B * H * Tk * D, 33, -1.f, 1.f);
      auto dense = [&](const std::vector<float>& x, int64_t T, int64_t from, int64_t n) {  // tokens [from, from + n)
        std::vector<char> d(size_t(B * H * n * D) * esz);
        const float* src = x.data() + from * D;
        attention_to_dense(src, AttnLayout::bhtd(H, T, D), B, H, n, D, compute, d.data());
        return d;
      };
      auto spec = [&](int64_t kv) {
        AttentionSpec s = spec_of(B, H, Tq, kv, D, compute);
        s.q_block = 16;
        s.kv_block = KB;
        s.bf16_qk_pad = pad;
        return s;
      };
      const std::vector<char> qd = dense(q, Tq, 0, Tq);
      std::vector<float> want(size_t(B * H * Tq * D));
      const std::vector<char> kall = dense(k, Tk, 0, Tk), vall = dense(v, Tk, 0, Tk);
      Attention(spec(Tk)).run_dense(qd.data(), kall.data(), vall.data(), want.data(), nullptr);

      std::vector<float> got(want.size(), NAN), m(size_t(B * H * Tq), NAN), l(m.size(), NAN);
      int64_t from = 0;
      for (size_t i = 0; i < split.sets.size(); ++i) {
        const int64_t n = split.sets[i];
        const std::vector<char> kd = dense(k, Tk, from, n), vd = dense(v, Tk, from, n);
        AttentionCarry carry;
        carry.m = m.data();
        carry.l = l.data();
        carry.first = i == 0;
        carry.last = i + 1 == split.sets.size();
        Attention(spec(n)).run_dense_part(qd.data(), kd.data(), vd.data(), got.data(), carry);
        from += n;
      }
      INFO(dtype_name(compute) << " sets of " << split.sets.size() << (split.exact ? " (whole blocks)" : "")
                               << (pad == QkPad::On ? ", Q and K padded" : ""));
      if (split.exact)
        CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
      else
        kt::check_close(got.data(), want.data(), want.size(), compute == DType::BF16 ? 1e-2 : 1e-6,
                        compute == DType::BF16 ? 2e-3 : 1e-6, "run_dense_part");
    }
  Attention a(spec_of(1, 1, 4, 4, 8, DType::F32));
  std::vector<float> x(32);
  CHECK_THROWS_WITH(a.run_dense_part(x.data(), x.data(), x.data(), x.data(), AttentionCarry{}),
                    Catch::Contains("needs the rows' m and l"));
}

TEST_CASE("Attention refuses a scale that is not positive and finite", "[kernels][attention]") {
  for (const float scale : {-0.125f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    AttentionSpec s;  // batch 1, one head
    s.q_len = s.kv_len = 8;
    s.head_dim = 16;
    s.scale = scale;
    INFO("scale " << scale);
    CHECK_THROWS_WITH(Attention(s), Catch::Contains("scale") && Catch::Contains("expected > 0"));
  }
}
