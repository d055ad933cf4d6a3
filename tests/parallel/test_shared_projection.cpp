// The Q, K, V projection with its rows shared among ranks (parallel/shared_projection.h), ranks
// as threads: every rank's q | k | v rows equal the local form's bit for bit, from one fused
// weight or three side by side, whoever computed them; a slow rank's rows are taken by the
// others; projections and feed-forwards alternating over one window; the local form where
// sharing is off or the weights are split.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>

#include "parallel/shared_feed_forward.h"
#include "parallel/shared_projection.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/compute_types.h"
#include "tests/scoped_env.h"
#include "random_tensor.h"
#include "thread_ranks.h"

using namespace dit;

namespace shared_projection_test {  // the whole file: its names stay apart from other test files' in a unity build

using dit_test::randn;
using dit_test::same_bits;
using dit_test::same_rows;

constexpr int64_t B = 2, D = 48;

// q, k, v [D, D] each and the same three stacked [3D, D].
struct Weights {
  LinearWeight q, k, v, qkv;
};

Weights weights(DType compute) {
  Weights w;
  w.q = LinearWeight::prepare(randn({D, D}, 1, 0.1f), randn({D}, 2, 0.1f), compute);
  w.k = LinearWeight::prepare(randn({D, D}, 3, 0.1f), randn({D}, 4, 0.1f), compute);
  w.v = LinearWeight::prepare(randn({D, D}, 5, 0.1f), randn({D}, 6, 0.1f), compute);
  w.qkv = LinearWeight::stack({w.q, w.k, w.v});
  return w;
}

// The reference form: one Linear per weight over all B·T rows, written side by side (as the
// models' split QkvLinear does), independent of the code under test.
class TestLocal final : public Projection {
 public:
  TestLocal(const std::vector<const LinearWeight*>& ws, int64_t rows, DType io) : io_(io) {
    for (const LinearWeight* w : ws) {
      LinearSpec s;
      s.rows = rows;
      s.in = D;
      s.out = w->out();
      s.out_stride = ws.size() > 1 ? 3 * D : 0;
      s.input = s.output = io;
      if (rows > 0) ops_.emplace_back(s, *w);
    }
  }
  void run(const void* x, void* y) override {
    int64_t col = 0;
    for (const Linear& op : ops_) {
      if (io_ == DType::BF16)
        op.run(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y) + col);
      else
        op.run(static_cast<const float*>(x), static_cast<float*>(y) + col);
      col += op.spec().out;
    }
  }

 private:
  DType io_;
  std::vector<Linear> ops_;
};

std::vector<const LinearWeight*> whole(const Weights& w, bool fused) {
  if (fused) return {&w.qkv};
  return {&w.q, &w.k, &w.v};
}

ProjectionParts parts(const Weights& w, int64_t T, DType compute, bool fused, bool give_whole = true) {
  ProjectionParts p;
  p.shape = {B, T, D, 3 * D, compute, compute};  // bf16 compute: bf16 rows in and out
  if (give_whole) p.whole = whole(w, fused);
  p.local = std::make_unique<TestLocal>(whole(w, fused), B * T, compute);
  return p;
}

Tensor rows_in(int rank, int layer, int64_t T, DType type) {
  Tensor x = randn({B, std::max<int64_t>(T, 1), D}, uint32_t(100 * rank + 10 * layer + 1));
  if (type == DType::F32) return x;
  Tensor x16 = Tensor::empty(x.shape(), DType::BF16);
  for (int64_t i = 0; i < x.numel(); ++i) x16.bf16()[i] = f32_to_bf16(x.f32()[i]);
  return x16;
}

constexpr int kLayers = 2;

// Each rank's outputs of kLayers projections (the reference: its own rows, no sharing).
std::vector<std::vector<Tensor>> local_results(const Weights& w, const std::vector<int64_t>& rows, DType compute) {
  std::vector<std::vector<Tensor>> out(rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    for (int l = 0; l < kLayers; ++l) {
      TestLocal op(whole(w, true), B * rows[r], compute);
      Tensor y = Tensor::empty({B, std::max<int64_t>(rows[r], 1), 3 * D}, compute);
      if (rows[r] > 0) op.run(rows_in(int(r), l, rows[r], compute).data(), y.data());
      out[r].push_back(y);
    }
  return out;
}

struct SharedRun {
  std::vector<std::vector<Tensor>> y;
  std::vector<uint64_t> helped;
};

// The same through a sharing over the ranks (threads), each projection followed by a
// feed-forward over the same window (the blocks alternate them) when `with_ffn`; rank `slow`
// sleeps before each of its own tasks.
SharedRun shared_results(const Weights& w, const std::vector<int64_t>& rows, DType compute, ShareRows mode,
                         int slow, bool fused, bool give_whole = true, bool with_ffn = true) {
  const int world = int(rows.size());
  SharedRun run;
  run.y.resize(size_t(world));
  run.helped.assign(size_t(world), 0);
  const LinearWeight w1 = LinearWeight::prepare(randn({4 * D, D}, 7, 0.1f), randn({4 * D}, 8, 0.1f), compute);
  const LinearWeight w2 = LinearWeight::prepare(randn({D, 4 * D}, 9, 0.1f), randn({D}, 10, 0.1f), compute);
  const std::string err = dit_test::run_rank_threads(
      world, std::chrono::seconds(60), [&](std::shared_ptr<ProcessGroup> pg, int r) {
        const int64_t T = rows[size_t(r)];
        std::function<void()> delay;
        if (r == slow) delay = [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
        auto sharing = std::make_shared<RowSharing>(pg, mode, delay);
        std::vector<std::unique_ptr<Projection>> ops;
        for (int l = 0; l < kLayers; ++l) ops.push_back(make_shared_projection(sharing, parts(w, T, compute, fused, give_whole)));
        FeedForwardParts fp;  // a feed-forward between the projections (its result is not checked here)
        fp.shape = {B, T, D, 4 * D, compute, compute};
        fp.w1 = &w1;
        fp.w2 = &w2;
        if (T > 0) {
          LinearSpec s1;
          s1.rows = B * T;
          s1.in = D;
          s1.out = 4 * D;
          s1.act = Act::GeluTanh;
          s1.input = s1.output = compute;
          fp.fc1 = Linear(s1, w1);
          LinearSpec s2;
          s2.batch = B;
          s2.rows = T;
          s2.in = 4 * D;
          s2.out = D;
          s2.gated_residual = true;
          s2.input = compute;
          fp.fc2 = make_local_linear(s2, w2);
          fp.hidden = Tensor::empty({B, T, 4 * D}, compute);
        }
        auto ff = with_ffn ? make_shared_feed_forward(sharing, std::move(fp)) : nullptr;
        Tensor h = rows_in(r, 9, T, compute), x = randn({B, std::max<int64_t>(T, 1), D}, 99), gate = randn({B, D}, 98);
        for (int l = 0; l < kLayers; ++l) {
          Tensor y = Tensor::empty({B, std::max<int64_t>(T, 1), 3 * D}, compute);
          ops[size_t(l)]->run(T > 0 ? rows_in(r, l, T, compute).data() : nullptr, T > 0 ? y.data() : nullptr);
          run.y[size_t(r)].push_back(y);
          const void* hp = T > 0 ? h.data() : nullptr;
          if (!ff) continue;
          if (compute == DType::BF16)
            ff->run(static_cast<const uint16_t*>(hp), T > 0 ? x.f32() : nullptr, T > 0 ? gate.f32() : nullptr);
          else
            ff->run(static_cast<const float*>(hp), T > 0 ? x.f32() : nullptr, T > 0 ? gate.f32() : nullptr);
        }
        run.helped[size_t(r)] = sharing->rows_for_others();
      });
  REQUIRE(err.empty());
  return run;
}

TEST_CASE("shared projection: every rank's q, k, v rows are the local form's, bit for bit, and a slow rank is helped",
          "[parallel][projection]") {
  const std::vector<int64_t> rows = {37, 200, 0};  // uneven, one shorter than a task, one without any
  // Then tasks of 64 rows (rank 1: 64, 64, 64 and 8 an item), rank 1 taking its own in chunks.
  for (const bool chunks : {false, true})
    for (const DType compute : dit_test::compute_types()) {
      const dit_test::ScopedEnv block("DIT_SHARE_ROWS_BLOCK", chunks ? "64" : nullptr);
      const dit_test::ScopedEnv chunked("DIT_SHARE_ROWS_CHUNKS", chunks ? "1" : nullptr);
      const Weights w = weights(compute);
      const auto want = local_results(w, rows, compute);
      for (const bool fused : {true, false}) {
        INFO(dtype_name(compute) << (fused ? " fused" : " three weights") << (chunks ? ", chunks of 64-row tasks" : ""));
        // (Three weights: without the feed-forward, so that any help would be the projection's.)
        const SharedRun got = shared_results(w, rows, compute, ShareRows::On, /*slow=*/1, fused, true, fused);
        for (size_t r = 0; r < rows.size(); ++r)
          for (int l = 0; l < kLayers; ++l) {
            INFO("rank " << r << " layer " << l);
            if (rows[r] > 0) CHECK(same_rows(got.y[r][size_t(l)], want[r][size_t(l)], dit_test::matmul_rows_independent()));
          }
        if (fused) {
          CHECK(got.helped[0] + got.helped[2] > 0);  // rank 1 sleeps before each task of its own
          CHECK(got.helped[1] == 0);
        } else {
          // Three weights' strided output (gemm:jit) gives a row of a task of 8 or 64 rows other bits
          // than among 400 rows in f32: each rank runs its own rows.
          CHECK(got.helped == std::vector<uint64_t>(rows.size(), 0));
        }
      }
    }
}

TEST_CASE("shared projection: off, or with split weights, each rank runs its own rows", "[parallel][projection]") {
  const std::vector<int64_t> rows = {64, 64};
  const Weights w = weights(DType::F32);
  const auto want = local_results(w, rows, DType::F32);
  for (const bool give_whole : {false, true}) {
    const SharedRun got =
        shared_results(w, rows, DType::F32, give_whole ? ShareRows::Off : ShareRows::On, 1, true, give_whole, false);
    for (size_t r = 0; r < rows.size(); ++r) {
      for (int l = 0; l < kLayers; ++l) CHECK(same_bits(got.y[r][size_t(l)], want[r][size_t(l)]));
      CHECK(got.helped[r] == 0);
    }
  }
}

}  // namespace shared_projection_test
