// Linear's residual (accumulate) and product (multiply) epilogues against a naive reference.
#include <catch2/catch.hpp>

#include "tests/compute_types.h"
#include "kernel_test_util.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/linear.h"

using namespace dit;

namespace {

void run_case(int64_t rows, int64_t in, int64_t out, Act act, bool bias, bool accumulate, bool multiply, DType compute,
              int64_t out_stride = 0) {
  LinearSpec s;
  s.rows = rows;
  s.in = in;
  s.out = out;
  s.act = act;
  s.accumulate = accumulate;
  s.multiply = multiply;
  s.out_stride = out_stride;
  const int64_t ld = out_stride ? out_stride : out;
  const uint32_t seed = uint32_t(rows * 101 + in * 7 + out + accumulate * 3 + multiply * 5);
  auto x = kt::randv(rows * in, seed);
  auto w = kt::randv(out * in, seed + 1, -0.5f, 0.5f);
  auto b = kt::randv(out, seed + 2);
  auto y0 = kt::randv(rows * ld, seed + 3);
  auto mul = kt::randv(rows * out, seed + 4, -2.f, 2.f);
  Tensor wt = Tensor::empty({out, in}), bt = Tensor::empty({out});
  std::copy(w.begin(), w.end(), wt.f32());
  std::copy(b.begin(), b.end(), bt.f32());
  Linear lin(s, LinearWeight::prepare(wt, bias ? bt : Tensor(), compute));
  std::vector<float> y = y0;
  lin.run(x.data(), y.data(), nullptr, multiply ? mul.data() : nullptr);
  auto rd = [&](float v) { return compute == DType::BF16 ? double(bf16_to_f32(f32_to_bf16(v))) : double(v); };
  std::vector<double> want(y0.begin(), y0.end());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += rd(x[r * in + i]) * rd(w[o * in + i]);
      if (act == Act::GeluTanh) acc = kt::gelu_tanh_ref(acc);
      if (act == Act::Silu) acc = kt::silu_ref(acc);
      if (multiply) acc *= mul[r * out + o];
      want[r * ld + o] = accumulate ? y0[r * ld + o] + acc : acc;
    }
  const bool bf = compute == DType::BF16;
  kt::check_close(y.data(), want.data(), want.size(), bf ? 1e-2 : 1e-4, bf ? 1e-2 : 1e-4,
                  std::string("linear ") + (accumulate ? "accumulate " : "") + (multiply ? "multiply " : "") +
                      dtype_name(compute) + " " + lin.impl_info());
}

}  // namespace

TEST_CASE("Linear accumulate: y += act(xW^T + b)", "[kernels][linear]") {
  for (DType c : dit_test::compute_types())
    for (bool bias : {false, true}) {
      run_case(1, 3, 5, Act::None, bias, true, false, c);
      run_case(37, 64, 48, Act::None, bias, true, false, c);
      run_case(20, 40, 24, Act::GeluTanh, bias, true, false, c);
      run_case(20, 40, 24, Act::None, bias, true, false, c, 72);  // a column block of a wider buffer
    }
}

TEST_CASE("Linear multiply: y = act(xW^T + b) * m (T5's gated GELU)", "[kernels][linear]") {
  for (DType c : dit_test::compute_types())
    for (Act act : {Act::None, Act::GeluTanh, Act::Silu}) {
      run_case(1, 3, 5, act, false, false, true, c);
      run_case(33, 48, 120, act, false, false, true, c);
      run_case(9, 16, 40, act, true, false, true, c);
    }
}

TEST_CASE("Linear epilogues exclude each other - multiply needs its operand", "[kernels][linear]") {
  Tensor w = Tensor::empty({5, 3});
  LinearWeight lw = LinearWeight::prepare(w, Tensor(), DType::F32);
  LinearSpec s;
  s.rows = 2;
  s.in = 3;
  s.out = 5;
  s.accumulate = s.multiply = true;
  CHECK_THROWS_AS(Linear(s, lw), dit::Error);
  s.accumulate = false;
  Linear lin(s, lw);
  std::vector<float> x(6), y(10);
  CHECK_THROWS_AS(lin.run(x.data(), y.data()), dit::Error);
}

TEST_CASE("Linear::set_weight: one Linear over several weights equals a Linear per weight", "[kernels][linear]") {
  for (DType c : dit_test::compute_types()) {
    const int64_t rows = 19, in = 40, out = 24;
    auto x = kt::randv(rows * in, 1);
    std::vector<LinearWeight> ws;
    std::vector<Tensor> keep;
    for (uint32_t seed : {2u, 3u, 4u}) {
      auto w = kt::randv(out * in, seed, -0.5f, 0.5f);
      Tensor t = Tensor::empty({out, in});
      std::copy(w.begin(), w.end(), t.f32());
      keep.push_back(t);
      ws.push_back(LinearWeight::prepare(t, Tensor(), c));
    }
    LinearSpec s;
    s.rows = rows;
    s.in = in;
    s.out = out;
    s.act = Act::GeluTanh;
    Linear shared(s, ws[0]);
    for (int round = 0; round < 2; ++round)
      for (const LinearWeight& w : ws) {
        std::vector<float> a(rows * out), b(rows * out);
        shared.set_weight(w);
        shared.run(x.data(), a.data());
        Linear(s, w).run(x.data(), b.data());
        CHECK(a == b);
      }
    Tensor other = Tensor::empty({out + 1, in});
    CHECK_THROWS_AS(shared.set_weight(LinearWeight::prepare(other, Tensor(), c)), dit::Error);
    Tensor bias = Tensor::empty({out});
    CHECK_THROWS_AS(shared.set_weight(LinearWeight::prepare(keep[1], bias, c)), dit::Error);
  }
}
