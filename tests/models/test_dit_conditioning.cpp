// DiT's conditioning path computed a window of steps at a time (models/dit/dit_conditioning.h)
// against a scalar version of docs/dit.md's formulas, step by step: the same modulation for
// every step, block and row whichever window computed it, and the weights read once per window.
// The model is dit-tiny with block 1's embedder its own (tests/data/derive_own_embedders.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "golden_util.h"
#include "models/common/embeddings.h"
#include "models/dit/dit_conditioning.h"
#include "models/dit/dit_config.h"
#include "models/dit/dit_weights.h"
#include "runtime/json_config.h"
#include "runtime/safetensors.h"
#include "runtime/tensor_parallel.h"

namespace {

using dit::LinearWeight;

// y = W·x + b in double, W [out, in] f32.
std::vector<double> affine(const LinearWeight& lw, const std::vector<double>& x) {
  const int64_t out = lw.out(), in = lw.in();
  std::vector<double> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double s = lw.bias.defined() ? lw.bias.f32()[o] : 0.0;
    for (int64_t i = 0; i < in; ++i) s += double(lw.weight.f32()[o * in + i]) * x[size_t(i)];
    y[size_t(o)] = s;
  }
  return y;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// SiLU(TimestepEmbedding(t) + class_table[y]) with block bw's embedder.   [D]
std::vector<double> naive_c(const dit::DiTBlockWeights& bw, double t, int64_t y) {
  std::vector<float> f(256);
  dit::timestep_embedding(t, 256, 1.0f, f.data());
  std::vector<double> h = affine(bw.t_fc1, std::vector<double>(f.begin(), f.end()));
  for (double& v : h) v = silu(v);
  std::vector<double> c = affine(bw.t_fc2, h);
  const int64_t D = int64_t(c.size());
  for (int64_t i = 0; i < D; ++i) c[size_t(i)] = silu(c[size_t(i)] + bw.class_table.f32()[y * D + i]);
  return c;
}

struct Tiny {
  dit::WeightStore store = dit::WeightStore::open_dir(dit_test::data_path("dit-tiny-own-embedders/transformer"));
  std::unique_ptr<dit::TensorParallel> tp = dit::make_serial_tensor_parallel();
  dit::DiTWeights w = dit::DiTWeights::load(
      dit::dit_config_from(dit::Config::load(dit_test::data_path("dit-tiny-own-embedders/transformer/config.json"))),
      store, dit::DType::F32, dit::QkvProjection::Auto, *tp);
};

// Every block's and the final layer's modulation for timesteps t [B] and classes y against
// the scalar version; returns the largest error relative to the largest value.
double check_step(const Tiny& m, const dit::DiTConditioning& cond, const std::vector<double>& t,
                  const std::vector<int64_t>& y) {
  const int64_t B = int64_t(y.size()), D = m.w.cfg.hidden();
  double err = 0, ref = 0;
  auto compare = [&](const float* got, const std::vector<double>& want) {  // one row [D]
    for (int64_t i = 0; i < D; ++i) {
      err = std::max(err, std::abs(double(got[i]) - want[size_t(i)]));
      ref = std::max(ref, std::abs(want[size_t(i)]));
    }
  };
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<double> c0 = naive_c(m.w.blocks[0], t[size_t(b)], y[size_t(b)]);
    const std::vector<double> fin = affine(m.w.final_ada, c0);  // [2D]: shift, scale
    for (int k = 0; k < 2; ++k)
      compare(cond.final_chunk(k) + b * D, std::vector<double>(fin.begin() + k * D, fin.begin() + (k + 1) * D));
    for (size_t l = 0; l < m.w.blocks.size(); ++l) {
      const std::vector<double> mod = affine(m.w.blocks[l].ada.w, naive_c(m.w.blocks[l], t[size_t(b)], y[size_t(b)]));
      for (int k = 0; k < 6; ++k)
        compare(cond.block_chunk(l, k) + b * D, std::vector<double>(mod.begin() + k * D, mod.begin() + (k + 1) * D));
    }
  }
  return err / ref;
}

}  // namespace

TEST_CASE("DiT conditioning: windows of steps give every step's modulation and read the weights once a window",
          "[models][dit]") {
  Tiny m;
  REQUIRE(m.w.blocks.size() == 2);
  // The fixture's point: block 1 has its own embedder (a model using block 0's fails here).
  REQUIRE(m.w.blocks[1].t_fc1.weight.data() != m.w.blocks[0].t_fc1.weight.data());
  const std::vector<int64_t> y = {4, 10};  // a class and the null class (10 classes)
  std::vector<double> schedule;
  for (int i = 0; i < 20; ++i) schedule.push_back(999.0 - 50.0 * i);

  dit::DiTConditioning cond;
  cond.prepare(m.w, 2, *m.tp);
  cond.begin(y, schedule);
  CHECK(cond.window_steps() == 10);  // at most 32 rows / batch 2 = 16 steps: two windows of 10
  double worst = 0;
  for (double ts : schedule) {
    const std::vector<double> t = {ts, ts};
    cond.select(t.data());
    worst = std::max(worst, check_step(m, cond, t, y));
  }
  CHECK(cond.windows_computed() == 2);
  CHECK(worst < 1e-5);

  SECTION("a timestep outside the schedule, and one per row, get a window of their own") {
    const std::vector<double> off = {123.5, 123.5}, mixed = {999.0, 7.0};
    cond.select(off.data());
    CHECK(check_step(m, cond, off, y) < 1e-5);
    cond.select(mixed.data());
    CHECK(check_step(m, cond, mixed, y) < 1e-5);
    CHECK(cond.windows_computed() == 4);
  }
  SECTION("going back in the schedule recomputes from there; new classes invalidate the window") {
    const std::vector<double> t3 = {schedule[3], schedule[3]}, t4 = {schedule[4], schedule[4]};
    cond.select(t3.data());
    cond.select(t4.data());  // in the window that t3 started
    CHECK(cond.windows_computed() == 3);
    CHECK(check_step(m, cond, t4, y) < 1e-5);
    const std::vector<int64_t> y2 = {7, 10};
    cond.begin(y2, schedule);
    cond.select(t4.data());
    CHECK(cond.windows_computed() == 4);
    CHECK(check_step(m, cond, t4, y2) < 1e-5);
  }
  SECTION("without a schedule every step is a window of one") {
    cond.begin(y, {});
    CHECK(cond.window_steps() == 1);
    const std::vector<double> t = {schedule[5], schedule[5]};
    cond.select(t.data());
    CHECK(check_step(m, cond, t, y) < 1e-5);
  }
}

TEST_CASE("DiT conditioning: a large batch gets shorter windows", "[models][dit]") {
  Tiny m;
  dit::DiTConditioning cond;
  const std::vector<int64_t> y(12, 3);
  cond.prepare(m.w, 12, *m.tp);
  std::vector<double> schedule;
  for (int i = 0; i < 7; ++i) schedule.push_back(900.0 - 100.0 * i);
  cond.begin(y, schedule);
  CHECK(cond.window_steps() == 2);  // 32 rows / 12 = 2 steps a window: 4 windows (the last one step)
  for (double ts : schedule) {
    const std::vector<double> t(12, ts);
    cond.select(t.data());
    CHECK(check_step(m, cond, t, y) < 1e-5);
  }
  CHECK(cond.windows_computed() == 4);
}
