#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>

#include "kernel_test_util.h"
#include "runtime/attention.h"
#include "runtime/engine.h"
#include "tests/compute_types.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/linear.h"

using namespace dit;

namespace {

// Naive scalar reference, double accumulation. w is PyTorch [out, in].
std::vector<double> linear_ref(const LinearSpec& s, const std::vector<float>& x, const std::vector<float>& w,
                               const std::vector<float>* bias, const std::vector<float>& y0,
                               const std::vector<float>& gate) {
  std::vector<double> y(s.batch * s.rows * s.out);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t o = 0; o < s.out; ++o) {
        double acc = bias ? (*bias)[o] : 0.0;
        for (int64_t i = 0; i < s.in; ++i) acc += double(x[(b * s.rows + r) * s.in + i]) * w[o * s.in + i];
        if (s.act == Act::GeluTanh) acc = kt::gelu_tanh_ref(acc);
        if (s.act == Act::Silu) acc = kt::silu_ref(acc);
        const int64_t idx = (b * s.rows + r) * s.out + o;
        y[idx] = s.gated_residual ? y0[idx] + double(gate[b * s.out + o]) * acc : acc;
      }
  return y;
}

Tensor make_tensor(const std::vector<float>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape);
  std::copy(v.begin(), v.end(), t.f32());
  return t;
}

void run_case(int64_t batch, int64_t rows, int64_t in, int64_t out, Act act, bool with_bias, bool gated, DType compute,
              bool bf16_storage = false, bool pack = false, bool gate_after = false) {
  LinearSpec s;
  s.batch = batch;
  s.rows = rows;
  s.in = in;
  s.out = out;
  s.act = act;
  s.gated_residual = gated;
  s.pack_weights = pack;
  s.gate_after_matmul = gate_after;
  uint32_t seed = uint32_t(batch * 1000003 + rows * 10007 + in * 101 + out + int(act) * 7 + with_bias * 3 + gated);
  auto x = kt::randv(batch * rows * in, seed + 1);
  auto w = kt::randv(out * in, seed + 2, -0.5f, 0.5f);
  auto bias = kt::randv(out, seed + 3);
  auto y0 = kt::randv(batch * rows * out, seed + 4);
  auto gate = kt::randv(batch * out, seed + 5, -2.f, 2.f);
  Tensor wt = make_tensor(w, {out, in});
  if (bf16_storage) wt = wt.to(DType::BF16);
  // the reference uses the weights as the kernel sees them
  std::vector<float> wref = w;
  if (compute == DType::BF16 || bf16_storage)
    for (auto& v : wref) v = bf16_to_f32(f32_to_bf16(v));
  std::vector<float> xref = x;
  if (compute == DType::BF16)
    for (auto& v : xref) v = bf16_to_f32(f32_to_bf16(v));
  Tensor bt = with_bias ? make_tensor(bias, {out}) : Tensor();
  const float* wptr_before = wt.dtype() == DType::F32 ? wt.f32() : nullptr;
  LinearWeight lw = LinearWeight::prepare(wt, bt, compute);
  if (compute == DType::F32 && !bf16_storage) CHECK(lw.weight.data() == wptr_before);  // no copy
  Linear lin(s, lw);
  std::vector<float> y = y0;
  lin.run(x.data(), y.data(), gated ? gate.data() : nullptr);
  auto want = linear_ref(s, xref, wref, with_bias ? &bias : nullptr, y0, gate);
  // bf16: the kernel rounds x and w exactly like the reference, so only accumulation order differs
  const double rtol = compute == DType::BF16 ? 1e-2 : 1e-4, atol = compute == DType::BF16 ? 1e-2 : 1e-4;
  std::ostringstream os;
  os << "linear b" << batch << " r" << rows << " " << in << "->" << out << " act " << int(act) << " bias "
     << with_bias << " gated " << gated << (gate_after ? " (gate after the matmul)" : "") << " "
     << dtype_name(compute) << " impl " << lin.impl_info();
  kt::check_close(y.data(), want.data(), y.size(), rtol, atol, os.str());
  // weights untouched
  if (wt.dtype() == DType::F32) kt::check_close(wt.f32(), w.data(), w.size(), 0, 0, "weights unchanged");
  // second run gives the same result (no state carried over)
  if (!gated) {
    std::vector<float> y2(y.size(), 123.f);
    lin.run(x.data(), y2.data());
    kt::check_close(y2, y, 0, 0, "rerun");
  }
}

}  // namespace

TEST_CASE("Linear matches a naive reference", "[kernels][linear]") {
  for (DType c : dit_test::compute_types())
    for (Act act : {Act::None, Act::GeluTanh, Act::Silu})
      for (bool bias : {false, true}) {
        run_case(1, 1, 3, 5, act, bias, false, c);
        run_case(1, 7, 13, 17, act, bias, false, c);
        run_case(2, 5, 64, 48, act, bias, false, c);
        run_case(2, 33, 72, 130, act, bias, false, c);
      }
}

TEST_CASE("Linear gated residual: y += gate[b] * act(xW^T + b)", "[kernels][linear]") {
  for (DType c : dit_test::compute_types())
    for (Act act : {Act::None, Act::GeluTanh, Act::Silu})
      for (bool bias : {false, true}) {
        run_case(2, 7, 13, 17, act, bias, true, c);
        run_case(2, 1, 3, 5, act, bias, true, c);
        run_case(3, 20, 64, 96, act, bias, true, c);
        run_case(2, 7, 13, 17, act, bias, true, c, false, false, true);
        run_case(3, 20, 64, 96, act, bias, true, c, false, true, true);
      }
}

TEST_CASE("Linear: gate_after_matmul is the gated form's alternative and says so", "[kernels][linear]") {
  LinearSpec s;
  s.batch = 2;
  s.rows = 5;
  s.in = 16;
  s.out = 24;
  s.gated_residual = true;
  s.gate_after_matmul = true;
  const LinearWeight lw = LinearWeight::prepare(make_tensor(kt::randv(24 * 16, 21), {24, 16}), Tensor(), DType::F32);
  CHECK(Linear(s, lw).impl_info().find("gate applied after the matmul") != std::string::npos);
  s.gated_residual = false;
  CHECK_THROWS_WITH(Linear(s, lw), Catch::Contains("gate_after_matmul needs gated_residual"));
}

TEST_CASE("a gated Linear gives each batch element the bits of a batch of one", "[kernels][linear]") {
  // What lets a CFG-parallel rank (batch 1) give the serial run's (batch 2) bits: the gated
  // form runs one matmul per batch element with that element's gate.
  const int64_t B = 3, M = 37, K = 96, N = 160;
  for (DType c : dit_test::compute_types())
    for (bool pack : {false, true}) {
      const auto x = kt::randv(B * M * K, 11), w = kt::randv(N * K, 12, -0.5f, 0.5f), bias = kt::randv(N, 13);
      const auto y0 = kt::randv(B * M * N, 14), gate = kt::randv(B * N, 15, -2.f, 2.f);
      const LinearWeight lw = LinearWeight::prepare(make_tensor(w, {N, K}), make_tensor(bias, {N}), c);
      LinearSpec s;
      s.batch = B;
      s.rows = M;
      s.in = K;
      s.out = N;
      s.act = Act::GeluTanh;
      s.gated_residual = true;
      s.pack_weights = pack;
      std::vector<float> all = y0;
      Linear(s, lw).run(x.data(), all.data(), gate.data());
      s.batch = 1;
      const Linear one(s, lw);
      for (int64_t b = 0; b < B; ++b) {
        std::vector<float> y(y0.begin() + b * M * N, y0.begin() + (b + 1) * M * N);
        one.run(x.data() + b * M * K, y.data(), gate.data() + b * N);
        INFO(dtype_name(c) << (pack ? " packed" : "") << " element " << b);
        CHECK(std::memcmp(y.data(), all.data() + b * M * N, y.size() * 4) == 0);
      }
    }
}

TEST_CASE("Linear with bf16-stored weights", "[kernels][linear]") {
  if (dit_test::bf16_available()) run_case(2, 9, 40, 24, Act::GeluTanh, true, false, DType::BF16, true);
  run_case(2, 9, 40, 24, Act::Silu, true, true, DType::F32, true);
}

TEST_CASE("bf16 compute is refused with one clear error where the CPU has none", "[kernels][linear][bf16]") {
  Tensor w = Tensor::empty({8, 16}), b;
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = 0.01f * float(i);
  LinearSpec spec;
  spec.batch = 1;
  spec.rows = 4;
  spec.in = 16;
  spec.out = 8;
  AttentionSpec as;
  as.batch = 1;
  as.heads = 2;
  as.q_len = 4;
  as.kv_len = 4;
  as.head_dim = 8;
  as.compute = DType::BF16;
  if (compute_supported(DType::BF16)) {  // AVX-512: bf16 layers build
    CHECK_NOTHROW(Linear(spec, LinearWeight::prepare(w, b, DType::BF16)));
    CHECK_NOTHROW(Attention(as));
    CHECK_NOTHROW(parse_compute_type("--dtype", "bf16"));
  } else {  // AVX2: one line naming what is missing and what to use, not oneDNN's status
    const std::string says = "bf16 compute is not available on this CPU (oneDNN ";
    CHECK_THROWS_WITH(Linear(spec, LinearWeight::prepare(w, b, DType::BF16)), Catch::StartsWith(says));
    CHECK_THROWS_WITH(Attention(as), Catch::StartsWith(says));
    CHECK_THROWS_WITH(parse_compute_type("--dtype", "bf16"), Catch::StartsWith("--dtype: " + says));
    CHECK_THROWS_WITH(parse_compute_type("--dtype", "bf16"), Catch::EndsWith("; use f32"));
  }
  CHECK(parse_compute_type("--dtype", "f32") == DType::F32);
  CHECK_THROWS_WITH(parse_compute_type("--dtype", "f16"), Catch::StartsWith("--dtype: unknown dtype 'f16'"));
}

TEST_CASE("Linear with weights packed into the matmul's layout", "[kernels][linear][packed]") {
  for (DType c : dit_test::compute_types())
    for (bool gated : {false, true}) {
      run_case(2, 7, 13, 17, Act::GeluTanh, true, gated, c, false, true);
      run_case(2, 40, 96, 80, Act::Silu, false, gated, c, false, true);
      run_case(1, 1, 3, 5, Act::None, true, gated, c, false, true);
    }
}

TEST_CASE("Linear rejects mismatched weights", "[kernels][linear]") {
  Tensor w = Tensor::empty({5, 3});
  LinearWeight lw = LinearWeight::prepare(w, Tensor(), DType::F32);
  LinearSpec s;
  s.rows = 2;
  s.in = 4;
  s.out = 5;
  CHECK_THROWS_AS(Linear(s, lw), dit::Error);
  LinearSpec g;
  g.rows = 2;
  g.in = 3;
  g.out = 5;
  g.gated_residual = true;
  Linear lin(g, lw);
  std::vector<float> x(6), y(10);
  CHECK_THROWS_AS(lin.run(x.data(), y.data(), nullptr), dit::Error);
}

TEST_CASE("Linear implementation names (debug)", "[kernels][linear][.debug]") {
  for (DType c : dit_test::compute_types())
    for (bool gated : {false, true}) {
      LinearSpec s;
      s.batch = 2;
      s.rows = 256;
      s.in = 1152;
      s.out = 4608;
      s.act = Act::GeluTanh;
      s.gated_residual = gated;
      Tensor w = Tensor::empty({s.out, s.in});
      Linear lin(s, LinearWeight::prepare(w, Tensor::empty({s.out}), c));
      std::printf("linear %s gated=%d: %s\n", dtype_name(c), int(gated), lin.impl_info().c_str());
    }
}

TEST_CASE("Linear with a bf16 input or output gives the f32-activation path's bits", "[kernels][linear][bf16]") {
  // What a bf16 matmul reads is its input rounded to bf16 (to nearest even), and a bf16 output
  // is the f32 result (bias and activation included) rounded the same way: so fc1 writing bf16
  // for fc2 to read changes no bit of fc2's result (models/common/feed_forward.h).
  if (!dit_test::bf16_available()) return;
  const int64_t B = 2, M = 33, K = 72, N = 130;
  auto x = kt::randv(B * M * K, 11);
  auto y0 = kt::randv(B * M * N, 12);
  auto gate = kt::randv(B * N, 13, -2.f, 2.f);
  Tensor w = make_tensor(kt::randv(N * K, 14, -0.5f, 0.5f), {N, K}), bias = make_tensor(kt::randv(N, 15), {N});
  const LinearWeight lw = LinearWeight::prepare(w, bias, DType::BF16);
  std::vector<uint16_t> x16(x.size());
  for (size_t i = 0; i < x.size(); ++i) x16[i] = f32_to_bf16(x[i]);
  LinearSpec s;
  s.batch = B;
  s.rows = M;
  s.in = K;
  s.out = N;
  for (Act act : {Act::None, Act::GeluTanh}) {
    s.act = act;
    s.gated_residual = false;
    std::vector<float> y(y0.size());
    Linear(s, lw).run(x.data(), y.data());  // f32 in, f32 out
    LinearSpec so = s;
    so.output = DType::BF16;
    std::vector<uint16_t> y16(y.size());
    Linear(so, lw).run(x.data(), y16.data());
    size_t differ = 0;
    for (size_t i = 0; i < y.size(); ++i) differ += y16[i] != f32_to_bf16(y[i]);
    CHECK(differ == 0);
    LinearSpec si = s;
    si.input = DType::BF16;
    std::vector<float> yi(y.size());
    Linear(si, lw).run(x16.data(), yi.data());
    kt::check_close(yi, y, 0, 0, "bf16 input");
    si.output = DType::BF16;
    std::vector<uint16_t> yio(y.size());
    Linear(si, lw).run(x16.data(), yio.data());
    CHECK(yio == y16);
    // A column block of a wider bf16 buffer (out_stride: a split QKV projection's Q, K or V):
    // the same bits in its columns, nothing written beside them.
    LinearSpec sb = so;
    sb.out_stride = N + 7;
    std::vector<uint16_t> wide(size_t(B * M * (N + 7)) + 3, 0x5555);
    Linear(sb, lw).run(x.data(), wide.data() + 3);
    size_t wrong = 0, touched = 0;
    for (int64_t r = 0; r < B * M; ++r)
      for (int64_t j = 0; j < N + 7; ++j) {
        const uint16_t got = wide[size_t(3 + r * (N + 7) + j)];
        if (j < N) wrong += got != y16[size_t(r * N + j)];
        else touched += got != 0x5555;
      }
    CHECK(wrong == 0);
    CHECK(touched == 0);
    CHECK(wide[0] == 0x5555);
  }
  // The gated residual (fc2's form) with a bf16 input.
  s.act = Act::None;
  s.gated_residual = true;
  std::vector<float> yg = y0, yg16 = y0;
  Linear(s, lw).run(x.data(), yg.data(), gate.data());
  LinearSpec sg = s;
  sg.input = DType::BF16;
  Linear(sg, lw).run(x16.data(), yg16.data(), gate.data());
  kt::check_close(yg16, yg, 0, 0, "gated, bf16 input");
  // Misuse: the types run() gets are the spec's; bf16 output only in the plain form, and only
  // with bf16 compute.
  CHECK_THROWS_WITH(Linear(sg, lw).run(x.data(), yg.data(), gate.data()), Catch::Contains("made for bf16 and f32"));
  LinearSpec bad = s;
  bad.output = DType::BF16;
  CHECK_THROWS_WITH(Linear(bad, lw), Catch::Contains("a bf16 output is the plain form only"));
  LinearSpec f = s;
  f.gated_residual = false;
  f.input = DType::BF16;
  CHECK_THROWS_WITH(Linear(f, LinearWeight::prepare(w, bias, DType::F32)), Catch::Contains("needs bf16 compute"));
}
