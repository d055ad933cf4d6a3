// Tensor-parallel linears (parallel/tensor_parallel.h) against one-rank Linear layers, ranks
// as threads: column, gathered-column and row-parallel splits, with and without Megatron
// sequence parallelism, even and uneven shards; and the shard arithmetic.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "parallel/tensor_parallel.h"
#include "runtime/dtype.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/weight_shard.h"
#include "random_tensor.h"
#include "thread_ranks.h"

using namespace dit;

namespace {

using dit_test::randn;

double rel_diff(const float* a, const float* b, int64_t n) {
  double m = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    m = std::max(m, double(std::fabs(a[i] - b[i])));
    ref = std::max(ref, double(std::fabs(b[i])));
  }
  return m / ref;
}

// What each rank of a tensor-parallel MLP gave: its residual rows of y, and how much of the
// shared-memory window path it took (1: its group has a window, 2: its rows went into it).
struct MlpRun {
  std::vector<std::vector<float>> y;
  std::vector<int> windowed;
};

// The row-parallel layer of a DiT block, y += gate ⊙ (x·Wᵀ + b), its input from a column-
// parallel layer with GELU: fc2(fc1(x)) over `world` ranks against one rank.
// The second layer's epilogue: y += gate ⊙ v, y += v, or y = v.
enum class Epilogue { Gated, Accumulate, Plain };

MlpRun check_mlp(int world, int64_t B, int64_t T, int64_t D, int64_t F, int64_t sp_min_tokens,
                 Epilogue epilogue = Epilogue::Gated) {
  set_num_threads(1);
  const Tensor x = randn({B, T, D}, 1), w1 = randn({F, D}, 2, 0.2f), b1 = randn({F}, 3), w2 = randn({D, F}, 4, 0.1f),
               b2 = randn({D}, 5), gate = randn({B, D}, 6), y0 = randn({B, T, D}, 7);
  // One rank.
  LinearSpec s1;
  s1.rows = B * T;
  s1.in = D;
  s1.out = F;
  s1.act = Act::GeluTanh;
  LinearSpec s2;
  s2.batch = B;
  s2.rows = T;
  s2.in = F;
  s2.out = D;
  s2.gated_residual = epilogue == Epilogue::Gated;
  s2.accumulate = epilogue == Epilogue::Accumulate;
  Tensor h = Tensor::empty({B, T, F}), want = y0.clone();
  Linear(s1, LinearWeight::prepare(w1, b1, DType::F32)).run(x.f32(), h.f32());
  Linear(s2, LinearWeight::prepare(w2, b2, DType::F32)).run(h.f32(), want.f32(), gate.f32());

  std::vector<double> diffs(size_t(world), INFINITY);
  MlpRun run;
  run.y.resize(size_t(world));
  run.windowed.assign(size_t(world), 0);
  const std::string err = dit_test::run_rank_threads(
      world, std::chrono::seconds(60), [&](std::shared_ptr<ProcessGroup> pg, int r) {
        auto tp = make_distributed_tensor_parallel(*pg, sp_min_tokens, true);
        tp->prepare(B, {0, T}, D);
        const TokenRange cols = tp->shard(F, 1), res = tp->residual();
        auto fc1 = tp->linear(Split::Column, s1, shard_rows(w1, b1, DType::F32, cols));
        auto fc2 = tp->linear(Split::Row, s2, shard_cols(w2, b2, DType::F32, cols));
        DIT_CHECK(fc1->out_local() == cols.size(), "column shard width");
        // The residual rows this rank holds: all T, or its token shard under Megatron SP.
        const int64_t R = res.size();
        Tensor xr = Tensor::empty({B, R, D}), y = Tensor::empty({B, R, D});
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < R; ++t)
            for (int64_t d = 0; d < D; ++d) {
              xr.f32()[(b * R + t) * D + d] = x.f32()[(b * T + res.begin + t) * D + d];
              y.f32()[(b * R + t) * D + d] = y0.f32()[(b * T + res.begin + t) * D + d];
            }
        Tensor hl = Tensor::empty({B, T, cols.size()});
        // The rows go where gather_buffer() says: this rank's window on one machine under SP.
        float* rows = tp->gather_buffer(xr.f32());
        if (rows != xr.f32()) std::memcpy(rows, xr.f32(), size_t(xr.numel()) * 4);
        run.windowed[size_t(r)] = int(pg->window_bytes() > 0) + int(rows != xr.f32());
        fc1->run(tp->gather(rows), hl.f32());
        fc2->run(hl.f32(), y.f32(), gate.f32());
        double m = 0, ref = 0;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t t = 0; t < R; ++t)
            for (int64_t d = 0; d < D; ++d) {
              const float got = y.f32()[(b * R + t) * D + d], w = want.f32()[(b * T + res.begin + t) * D + d];
              if (!std::isfinite(got)) m = INFINITY;
              m = std::max(m, double(std::fabs(got - w)));
              ref = std::max(ref, double(std::fabs(w)));
            }
        diffs[size_t(r)] = R == 0 ? 0.0 : m / ref;  // (an empty shard holds nothing to compare)
        run.y[size_t(r)].assign(y.f32(), y.f32() + y.numel());
      });
  REQUIRE(err.empty());
  for (int r = 0; r < world; ++r) {
    INFO("world " << world << " rank " << r << " sp_min_tokens " << sp_min_tokens);
    CHECK(diffs[size_t(r)] < 1e-5);
  }
  return run;
}

}  // namespace

TEST_CASE("tensor parallel: a column- then row-parallel MLP equals one rank", "[parallel][tp]") {
  for (int world : {2, 3}) {
    check_mlp(world, 2, 10, 24, 40, 1 << 30);  // plain TP: all-reduce
    check_mlp(world, 2, 10, 24, 40, 1);        // Megatron SP: reduce-scatter + all-gather (uneven shards)
    check_mlp(world, 1, 2, 8, 12, 1);          // fewer tokens than ranks: an empty shard
  }
}

TEST_CASE("tensor parallel: rows and partial products through shared-memory windows give the bits of the collectives",
          "[parallel][tp]") {
  // Megatron SP on one machine: each rank's rows for the column-parallel layer and its
  // row-parallel partial products go into its window, where the others read them in place
  // (the partial products summed in rank order); DIT_NO_SHM_WINDOWS sends them through the
  // all-gather and reduce-scatter instead. Even and uneven shards, an empty one, 2 to 4 ranks.
  struct Case {
    int world;
    int64_t B, T, D, F;
  };
  for (const Case& c : {Case{2, 2, 10, 24, 40}, Case{3, 2, 10, 24, 40}, Case{4, 1, 3, 8, 12}, Case{3, 2, 700, 300, 96}})
  for (Epilogue e : {Epilogue::Gated, Epilogue::Accumulate, Epilogue::Plain}) {
    INFO("world " << c.world << " tokens " << c.T << " epilogue " << int(e));
    const MlpRun windows = check_mlp(c.world, c.B, c.T, c.D, c.F, 1, e);
    setenv("DIT_NO_SHM_WINDOWS", "1", 1);  // before the rank threads start
    const MlpRun messages = check_mlp(c.world, c.B, c.T, c.D, c.F, 1, e);
    unsetenv("DIT_NO_SHM_WINDOWS");
    for (int r = 0; r < c.world; ++r) {
      INFO("rank " << r);
      CHECK(windows.windowed[size_t(r)] == 2);
      CHECK(messages.windowed[size_t(r)] == 0);
      REQUIRE(windows.y[size_t(r)].size() == messages.y[size_t(r)].size());
      const std::vector<float>&a = windows.y[size_t(r)], &b = messages.y[size_t(r)];
      CHECK((a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0));  // bit for bit (an empty shard: nothing)
    }
  }
}

TEST_CASE("tensor parallel: bf16 rows gather to the same places as f32 rows, over windows, shared memory and TCP",
          "[parallel][tp][bf16]") {
  // A norm's bf16 output for bf16 linears (models/common/block_input.h) goes through
  // gather_buffer() and gather() like f32 rows: every rank must end with all [B, T, D] rows,
  // bit for bit. Uneven shards, an empty one (T = 2 over 3 ranks), odd D.
  set_num_threads(1);
  struct Case {
    int world;
    int64_t B, T, D;
  };
  for (const Case& c : {Case{2, 2, 10, 24}, Case{3, 2, 10, 7}, Case{3, 1, 2, 8}, Case{3, 2, 700, 300}})
    for (int path = 0; path < 3; ++path) {  // 0: windows, 1: shared-memory all-gather, 2: TCP all-gather
      INFO("world " << c.world << " tokens " << c.T << " D " << c.D << " path " << path);
      const Tensor x = randn({c.B, c.T, c.D}, 21);
      std::vector<uint16_t> want(size_t(x.numel()));
      for (size_t i = 0; i < want.size(); ++i) want[i] = f32_to_bf16(x.f32()[i]);
      std::vector<int> ok(size_t(c.world), 0), windowed(size_t(c.world), -1);
      if (path > 0) setenv("DIT_NO_SHM_WINDOWS", "1", 1);  // before the rank threads start
      const std::string err = dit_test::run_rank_threads(
          c.world, std::chrono::seconds(60),
          [&](std::shared_ptr<ProcessGroup> pg, int r) {
            auto tp = make_distributed_tensor_parallel(*pg, 1, true);  // Megatron SP
            tp->prepare(c.B, {0, c.T}, c.D);
            const TokenRange res = tp->residual();
            std::vector<uint16_t> own(size_t(c.B * res.size() * c.D) + 1);
            for (int step = 0; step < 2; ++step) {  // the window is handed out again
              uint16_t* rows = tp->gather_buffer(own.data());
              windowed[size_t(r)] = rows != own.data();
              for (int64_t b = 0; b < c.B; ++b)
                for (int64_t t = 0; t < res.size(); ++t)
                  for (int64_t d = 0; d < c.D; ++d)
                    rows[(b * res.size() + t) * c.D + d] = want[size_t((b * c.T + res.begin + t) * c.D + d)];
              const uint16_t* all = tp->gather(rows);
              ok[size_t(r)] += std::memcmp(all, want.data(), want.size() * 2) == 0;
            }
          },
          path < 2);
      unsetenv("DIT_NO_SHM_WINDOWS");
      REQUIRE(err.empty());
      for (int r = 0; r < c.world; ++r) {
        INFO("rank " << r);
        CHECK(ok[size_t(r)] == 2);
        CHECK(windowed[size_t(r)] == (path == 0));
      }
    }
}

TEST_CASE("tensor parallel: gathered column linear equals one rank", "[parallel][tp]") {
  set_num_threads(1);
  const int64_t B = 3, D = 16, O = 6 * 16 + 2;  // 98 columns: uneven over 3 ranks
  const Tensor x = randn({B, D}, 8), w = randn({O, D}, 9), b = randn({O}, 10);
  LinearSpec s;
  s.rows = B;
  s.in = D;
  s.out = O;
  Tensor want = Tensor::empty({B, O});
  Linear(s, LinearWeight::prepare(w, b, DType::F32)).run(x.f32(), want.f32());
  for (int world : {2, 3}) {
    std::vector<double> diffs(size_t(world), INFINITY);
    const std::string err = dit_test::run_rank_threads(
        world, std::chrono::seconds(60), [&](std::shared_ptr<ProcessGroup> pg, int r) {
          auto tp = make_distributed_tensor_parallel(*pg, 1 << 30, true);
          auto op = tp->linear(Split::ColumnGather, s, shard_rows(w, b, DType::F32, tp->shard(O, 1)));
          Tensor y = Tensor::empty({B, O});
          op->run(x.f32(), y.f32());
          diffs[size_t(r)] = rel_diff(y.f32(), want.f32(), B * O);
        });
    REQUIRE(err.empty());
    for (double d : diffs) CHECK(d == 0);  // each column computed once, gathered: bit for bit
  }
}

TEST_CASE("tensor parallel: shards keep heads whole and cover every feature once", "[parallel][tp]") {
  const std::string err = dit_test::run_rank_threads(4, std::chrono::seconds(30), [&](std::shared_ptr<ProcessGroup> pg,
                                                                                      int r) {
    auto tp = make_distributed_tensor_parallel(*pg, 1 << 30, true);
    // 6 heads of 8 over 4 ranks: 2, 2, 1, 1 heads.
    const TokenRange h = tp->shard(48, 8);
    const int64_t want_begin[] = {0, 16, 32, 40}, want_end[] = {16, 32, 40, 48};
    DIT_CHECK(h.begin == want_begin[r] && h.end == want_end[r], "head shard of rank " << r);
    bool refused = false;
    try {
      tp->shard(24, 8);  // 3 heads over 4 ranks
    } catch (const Error& e) {
      refused = std::string(e.what()).find("3 attention heads cannot be split over 4 ranks") != std::string::npos;
    }
    DIT_CHECK(refused, "3 heads over 4 ranks must be refused with a clear message");
  });
  CHECK(err.empty());
}
