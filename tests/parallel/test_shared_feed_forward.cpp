// The blocks' feed-forward with its rows shared among ranks (parallel/shared_feed_forward.h),
// ranks as threads: every rank's x equals the local form's bit for bit, whoever computed its
// rows; a slow rank's rows are taken by the others; the local form where sharing is off or
// the weights are split.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "parallel/shared_feed_forward.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/compute_types.h"
#include "tests/scoped_env.h"
#include "random_tensor.h"
#include "thread_ranks.h"

using namespace dit;

namespace shared_feed_forward_test {  // the whole file: its names stay apart from other test files' in a unity build

using dit_test::randn;
using dit_test::same_bits;
using dit_test::same_rows;

constexpr int64_t B = 2, D = 48, M = 4 * D;

struct Weights {
  LinearWeight w1, w2;
};

Weights weights(DType compute) {
  return {LinearWeight::prepare(randn({M, D}, 1, 0.1f), randn({M}, 2, 0.1f), compute),
          LinearWeight::prepare(randn({D, M}, 3, 0.1f), randn({D}, 4, 0.1f), compute)};
}

// One rank's inputs: h in the input type, x and the gate, for `layer`.
struct RankInput {
  Tensor h, x, gate;
};

RankInput input(int rank, int layer, int64_t T, DType in_type) {
  const uint32_t s = uint32_t(100 * rank + 10 * layer);
  RankInput in{randn({B, std::max<int64_t>(T, 1), D}, s + 1), randn({B, std::max<int64_t>(T, 1), D}, s + 2),
               randn({B, D}, s + 3)};
  if (in_type == DType::BF16) {
    Tensor h16 = Tensor::empty(in.h.shape(), DType::BF16);
    for (int64_t i = 0; i < in.h.numel(); ++i) h16.bf16()[i] = f32_to_bf16(in.h.f32()[i]);
    in.h = h16;
  }
  return in;
}

// The parts of a feed-forward over T rows of each batch element (the whole weights given).
FeedForwardParts parts(const Weights& w, int64_t T, DType compute) {
  FeedForwardParts p;
  p.shape = {B, T, D, M, compute, compute};  // bf16 compute: bf16 rows in, bf16 hidden
  p.w1 = &w.w1;
  p.w2 = &w.w2;
  if (T > 0) {
    LinearSpec s1;
    s1.rows = B * T;
    s1.in = D;
    s1.out = M;
    s1.act = Act::GeluTanh;
    s1.input = s1.output = compute;
    p.fc1 = Linear(s1, w.w1);
    LinearSpec s2;
    s2.batch = B;
    s2.rows = T;
    s2.in = M;
    s2.out = D;
    s2.gated_residual = true;
    s2.input = compute;
    p.fc2 = make_local_linear(s2, w.w2);
    p.hidden = Tensor::empty({B, T, M}, compute);
  }
  return p;
}

void run_ff(FeedForward& ff, const RankInput& in, Tensor& x, int64_t T) {
  const void* h = T > 0 ? in.h.data() : nullptr;
  float* xp = T > 0 ? x.f32() : nullptr;
  const float* g = T > 0 ? in.gate.f32() : nullptr;
  if (in.h.dtype() == DType::BF16)
    ff.run(static_cast<const uint16_t*>(h), xp, g);
  else
    ff.run(static_cast<const float*>(h), xp, g);
}

constexpr int kLayers = 2, kRepeats = 2;

// x after kRepeats passes over kLayers feed-forwards of the local form, for each rank's rows.
std::vector<Tensor> local_results(const Weights& w, const std::vector<int64_t>& rows, DType compute) {
  std::vector<Tensor> out;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::vector<std::unique_ptr<FeedForward>> ffs;
    for (int l = 0; l < kLayers; ++l) ffs.push_back(make_local_feed_forward(parts(w, rows[r], compute)));
    Tensor x = input(int(r), 0, rows[r], compute).x.clone();
    for (int k = 0; k < kRepeats; ++k)
      for (int l = 0; l < kLayers; ++l) run_ff(*ffs[size_t(l)], input(int(r), l, rows[r], compute), x, rows[r]);
    out.push_back(x);
  }
  return out;
}

// The same through a sharing over the ranks (threads); rank `slow` sleeps before each of its own
// tasks. Returns each rank's x and rows computed for others; `weights_whole` false: the parts
// say the weights are split (no w1, w2).
struct SharedRun {
  std::vector<Tensor> x;
  std::vector<uint64_t> helped;
};

SharedRun shared_results(const Weights& w, const std::vector<int64_t>& rows, DType compute, ShareRows mode, int slow,
                         bool weights_whole = true) {
  const int world = int(rows.size());
  SharedRun run;
  run.x.resize(size_t(world));
  run.helped.assign(size_t(world), 0);
  const std::string err = dit_test::run_rank_threads(
      world, std::chrono::seconds(60), [&](std::shared_ptr<ProcessGroup> pg, int r) {
        std::function<void()> delay;
        if (r == slow) delay = [] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); };
        auto sharing = std::make_shared<RowSharing>(pg, mode, delay);
        std::vector<std::unique_ptr<FeedForward>> ffs;
        for (int l = 0; l < kLayers; ++l) {
          FeedForwardParts p = parts(w, rows[size_t(r)], compute);
          if (!weights_whole) p.w1 = p.w2 = nullptr;
          ffs.push_back(make_shared_feed_forward(sharing, std::move(p)));
        }
        Tensor x = input(r, 0, rows[size_t(r)], compute).x.clone();
        for (int k = 0; k < kRepeats; ++k)
          for (int l = 0; l < kLayers; ++l)
            run_ff(*ffs[size_t(l)], input(r, l, rows[size_t(r)], compute), x, rows[size_t(r)]);
        run.x[size_t(r)] = x;
        run.helped[size_t(r)] = sharing->rows_for_others();
      });
  REQUIRE(err.empty());
  return run;
}

// shared_results with sharing on and rank 1 slow, the environment variable `var` set to `value`.
SharedRun shared_results_with(const char* var, const char* value, const Weights& w, const std::vector<int64_t>& rows,
                              DType compute) {
  const dit_test::ScopedEnv env(var, value);  // ("": as if unset)
  return shared_results(w, rows, compute, ShareRows::On, /*slow=*/1);
}

TEST_CASE("shared feed-forward: every rank's rows are the local form's, bit for bit, and a slow rank is helped",
          "[parallel][ffn]") {
  // Uneven rows (a task: 64 rows or more; 200 rows make several tasks an item),
  // a rank with fewer rows than a task, one without any. Then with DIT_SHARE_ROWS_TAIL=2:
  // rank 1's last whole task (of 112 rows) is claimed last as 64, 32 and 16 rows.
  const std::vector<int64_t> rows = {37, 200, 0};
  for (const char* tail : {"", "2"})
    for (const DType compute : dit_test::compute_types()) {
      INFO(dtype_name(compute) << ", DIT_SHARE_ROWS_TAIL '" << tail << "'");
      const Weights w = weights(compute);
      const std::vector<Tensor> want = local_results(w, rows, compute);
      const SharedRun got = shared_results_with("DIT_SHARE_ROWS_TAIL", tail, w, rows, compute);
      for (size_t r = 0; r < rows.size(); ++r) {
        INFO("rank " << r);
        if (rows[r] > 0) CHECK(same_rows(got.x[r], want[r], dit_test::matmul_rows_independent()));
      }
      // Rank 1 sleeps before each task of its own: the others take some of them.
      CHECK(got.helped[0] + got.helped[2] > 0);
      CHECK(got.helped[1] == 0);
    }
}

TEST_CASE("shared feed-forward: DIT_SHARE_ROWS_BLOCK's tasks of 16 rows give the local form's bits, in chunks or not",
          "[parallel][ffn]") {
  // Rank 1 (200 rows: 13 tasks an item, 12 of 16 rows) takes its own in chunks of 8, 4, ...
  // tasks (one matmul over 128, 64, ... rows), or one at a time with DIT_SHARE_ROWS_CHUNKS=0.
  const std::vector<int64_t> rows = {37, 200, 0};
  for (const char* chunks : {"", "0", "1"})
    for (const DType compute : dit_test::compute_types()) {
      INFO(dtype_name(compute) << ", DIT_SHARE_ROWS_CHUNKS '" << chunks << "'");
      const dit_test::ScopedEnv env("DIT_SHARE_ROWS_CHUNKS", chunks);
      const Weights w = weights(compute);
      const std::vector<Tensor> want = local_results(w, rows, compute);
      const SharedRun got = shared_results_with("DIT_SHARE_ROWS_BLOCK", "16", w, rows, compute);
      for (size_t r = 0; r < 2; ++r) CHECK(same_rows(got.x[r], want[r], dit_test::matmul_rows_independent()));
      // Rank 1 is slow: the others take some of its tasks.
      CHECK(got.helped[0] + got.helped[2] > 0);
    }
  CHECK(parse_share_rows_chunks("DIT_SHARE_ROWS_CHUNKS", "0") == 0);
  CHECK(parse_share_rows_chunks("DIT_SHARE_ROWS_CHUNKS", "1") == 1);
  for (const char* bad : {"", "2", "on", "-1", "01"})
    CHECK_THROWS_WITH(parse_share_rows_chunks("DIT_SHARE_ROWS_CHUNKS", bad),
                      Catch::Contains("DIT_SHARE_ROWS_CHUNKS: '" + std::string(bad) + "'") && Catch::Contains("0 or 1"));
}

TEST_CASE("shared feed-forward: rows a task", "[parallel][ffn]") {
  CHECK(share_rows_block(256) == 64);      // 8 ranks of 1024 tokens x 2: 4 tasks a rank
  CHECK(share_rows_block(1024) == 256);
  CHECK(share_rows_block(1000) == 256);    // 250, rounded up to 16 rows
  CHECK(share_rows_block(100) == 64);      // at least 64 rows
  CHECK(share_rows_block(16384) == 1024);  // at most 1024
  CHECK(share_rows_block(256, 32) == 32);  // the override
  CHECK(parse_share_rows_block("DIT_SHARE_ROWS_BLOCK", "48") == 48);
  for (const char* bad : {"", "8", "4097", "64x", "-64", "abc"})
    CHECK_THROWS_WITH(parse_share_rows_block("DIT_SHARE_ROWS_BLOCK", bad),
                      Catch::Contains("DIT_SHARE_ROWS_BLOCK: '" + std::string(bad) + "'") &&
                          Catch::Contains("16 to 4096"));
}

TEST_CASE("shared rows: the tail's pieces", "[parallel][ffn]") {
  auto pieces = [](int64_t block, int halvings) {
    int64_t p[8];
    const int n = RowTaskList::tail(block, halvings, p);
    return std::vector<int64_t>(p, p + n);
  };
  CHECK(pieces(64, 2) == std::vector<int64_t>{32, 16, 16});
  CHECK(pieces(64, 6) == std::vector<int64_t>{32, 16, 16});  // not below 16 rows
  CHECK(pieces(112, 2) == std::vector<int64_t>{64, 32, 16});
  CHECK(pieces(256, 2) == std::vector<int64_t>{128, 64, 64});
  CHECK(pieces(1024, 6) == std::vector<int64_t>{512, 256, 128, 64, 32, 16, 16});
  CHECK(pieces(256, 0).empty());
  CHECK(pieces(16, 2).empty());
  CHECK(pieces(48, 2) == std::vector<int64_t>{32, 16});
  CHECK(parse_share_rows_tail("DIT_SHARE_ROWS_TAIL", "0") == 0);
  CHECK(parse_share_rows_tail("DIT_SHARE_ROWS_TAIL", "6") == 6);
  for (const char* bad : {"", "7", "-1", "2x", "10"})
    CHECK_THROWS_WITH(parse_share_rows_tail("DIT_SHARE_ROWS_TAIL", bad),
                      Catch::Contains("DIT_SHARE_ROWS_TAIL: '" + std::string(bad) + "'") && Catch::Contains("0 to 6"));
}

TEST_CASE("shared rows: the tasks cover every row once, the tail's pieces last", "[parallel][ffn]") {
  for (const int64_t block : {16, 48, 64, 112, 256})
    for (const int halvings : {0, 1, 2, 6})
      for (const int64_t batch : {1, 2, 3})
        for (int64_t rows = 0; rows <= 600; rows += 37) {
          INFO("block " << block << " halvings " << halvings << " batch " << batch << " rows " << rows);
          const RowTaskList list(rows, batch, block, halvings);
          int64_t p[8];
          const int tail = rows >= block ? RowTaskList::tail(block, halvings, p) : 0;
          // Naive: the items' tasks of `block` rows and the shorter last, one after another.
          const int64_t per_item = (rows + block - 1) / block;
          REQUIRE(list.count() == batch * per_item + std::max(tail - 1, 0));
          std::vector<int> seen(size_t(batch * rows), 0);
          for (int64_t t = 0; t < list.count(); ++t) {
            const RowTask k = list.at(t);
            REQUIRE(k.item >= 0);
            REQUIRE(k.item < batch);
            REQUIRE(k.rows > 0);
            REQUIRE(k.row0 >= 0);
            REQUIRE(k.row0 + k.rows <= rows);
            for (int64_t r = k.row0; r < k.row0 + k.rows; ++r) ++seen[size_t(k.item * rows + r)];
            const int64_t from_end = list.count() - 1 - t;
            if (from_end < tail) {
              CHECK(k.item == batch - 1);
              CHECK(k.rows == p[tail - 1 - from_end]);
            } else if (t < (batch - 1) * per_item || tail == 0) {
              CHECK(k.item == t / per_item);  // the plain order
              CHECK(k.row0 == t % per_item * block);
            } else {
              CHECK(k.rows <= block);
            }
          }
          CHECK(std::count(seen.begin(), seen.end(), 1) == int64_t(seen.size()));
        }
}

TEST_CASE("shared rows: a chunk is the most whole tasks of one item, a power of two up to the limit", "[parallel][ffn]") {
  for (const int64_t block : {16, 48, 64})
    for (const int halvings : {0, 2})
      for (const int64_t batch : {1, 2, 3})
        for (int64_t rows = 0; rows <= 400; rows += 37) {
          const RowTaskList list(rows, batch, block, halvings);
          // Naive: whether tasks [t, t + k) are all of `block` rows, of one item, rows adjoining.
          auto whole_run = [&](int64_t t, int64_t k) {
            if (t + k > list.count()) return false;
            for (int64_t i = 0; i < k; ++i) {
              const RowTask a = list.at(t), b = list.at(t + i);
              if (b.rows != block || b.item != a.item || b.row0 != a.row0 + i * block) return false;
            }
            return true;
          };
          int64_t most_seen = 1;
          for (int64_t t = 0; t < list.count(); ++t)
            for (int64_t most = 1; most <= 20; ++most) {
              INFO("block " << block << " halvings " << halvings << " batch " << batch << " rows " << rows << " task "
                            << t << " most " << most);
              const int64_t k = list.chunk(t, most);
              REQUIRE(k >= 1);
              CHECK((k & (k - 1)) == 0);  // a power of two
              CHECK(k <= most);
              CHECK((k == 1 || whole_run(t, k)));
              for (int64_t bigger = 2 * k; bigger <= most; bigger *= 2) CHECK_FALSE(whole_run(t, bigger));
              if (most == (list.count() - t) / 2) most_seen = std::max(most_seen, k);  // as the owner asks
            }
          CHECK(most_seen <= list.most_chunk());  // every chunk the owner takes has its linears
        }
}

TEST_CASE("shared feed-forward: off, or with split weights, each rank runs its own rows", "[parallel][ffn]") {
  const std::vector<int64_t> rows = {64, 64};
  const Weights w = weights(DType::F32);
  const std::vector<Tensor> want = local_results(w, rows, DType::F32);
  for (const bool whole : {false, true}) {
    const SharedRun got = shared_results(w, rows, DType::F32, whole ? ShareRows::Off : ShareRows::On, 1, whole);
    for (size_t r = 0; r < rows.size(); ++r) {
      CHECK(same_bits(got.x[r], want[r]));
      CHECK(got.helped[r] == 0);
    }
  }
}

TEST_CASE("shared feed-forward: the values of --share-rows", "[parallel][ffn]") {
  CHECK(parse_share_rows("auto") == ShareRows::Auto);
  CHECK(parse_share_rows("on") == ShareRows::On);
  CHECK(parse_share_rows("off") == ShareRows::Off);
  CHECK_THROWS_WITH(parse_share_rows("yes"), Catch::Contains("--share-rows") && Catch::Contains("auto, on, off"));
}

TEST_CASE("shared feed-forward: a rank failing in the middle of a use becomes dit::Error on the others, no hang",
          "[parallel][ffn]") {
  // Rank 1 fails in its first task, after it has published its rows: the others take its tasks
  // or wait for it, and fail through the store (not the timeout) with the cause.
  const std::vector<int64_t> rows = {64, 64, 64};
  const Weights w = weights(DType::F32);
  std::vector<std::string> errors(rows.size());
  const std::string err = dit_test::run_rank_threads(
      int(rows.size()), std::chrono::seconds(20), [&](std::shared_ptr<ProcessGroup> pg, int r) {
        std::function<void()> fail;
        if (r == 1) fail = [] { throw Error("rank 1 gave up"); };
        auto sharing = std::make_shared<RowSharing>(pg, ShareRows::On, fail);
        auto ff = make_shared_feed_forward(sharing, parts(w, 64, DType::F32));
        Tensor x = input(r, 0, 64, DType::F32).x.clone();
        try {
          for (int k = 0; k < 3; ++k) run_ff(*ff, input(r, 0, 64, DType::F32), x, 64);
        } catch (const Error& e) {
          errors[size_t(r)] = e.what();
          pg->abort(e.what());
        }
      });
  INFO(err);
  CHECK(errors[1] == "rank 1 gave up");
  for (const int r : {0, 2}) {
    INFO("rank " << r << ": " << errors[size_t(r)]);
    CHECK(errors[size_t(r)].find("rank 1 failed: rank 1 gave up") != std::string::npos);
  }
}

}  // namespace shared_feed_forward_test
