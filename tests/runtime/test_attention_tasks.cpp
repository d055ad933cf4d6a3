// Attention::run_dense with a task queue (runtime/attention.h): one run's tasks split between
// callers as they claim them (Ulysses' ranks on one machine share them through their windows)
// give run_dense's output bit for bit, each task computed once.
#include <catch2/catch.hpp>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kernel_test_util.h"
#include "runtime/attention.h"
#include "runtime/dtype.h"
#include "tests/compute_types.h"

using namespace dit;

namespace {

// Claims from a counter shared by every caller, at most `limit` tasks for this one; counts how
// often each task is reported finished.
class CountingQueue final : public AttentionTaskQueue {
 public:
  CountingQueue(std::atomic<int64_t>& next, int64_t total, int64_t limit, std::vector<std::atomic<int>>& finished)
      : next_(next), total_(total), limit_(limit), finished_(finished) {}
  int64_t claim() noexcept override {
    if (claimed_.fetch_add(1) >= limit_) return -1;
    const int64_t t = next_.fetch_add(1);
    return t < total_ ? t : -1;
  }
  void finished(int64_t task) noexcept override { finished_[size_t(task)].fetch_add(1); }

 private:
  std::atomic<int64_t>& next_;
  int64_t total_, limit_;
  std::atomic<int64_t> claimed_{0};
  std::vector<std::atomic<int>>& finished_;
};

// Hands out one task beyond the run's.
class BadQueue final : public AttentionTaskQueue {
 public:
  explicit BadQueue(int64_t task) : task_(task) {}
  int64_t claim() noexcept override { return std::exchange(task_, -1); }
  void finished(int64_t) noexcept override {}

 private:
  int64_t task_;
};

}  // namespace

TEST_CASE("Attention::run_dense over claimed tasks: shared between callers, run_dense's bits", "[kernels][attention][dense]") {
  // bf16 also with Q·Kᵀ over a padded head_dim (each block padded in the claiming thread).
  std::vector<std::pair<DType, QkPad>> types = {{DType::F32, QkPad::Off}};
  if (dit_test::bf16_available()) types.insert(types.end(), {{DType::BF16, QkPad::Off}, {DType::BF16, QkPad::On}});
  for (const auto& form : types) {
    const DType compute = form.first;
    const QkPad pad = form.second;
    const int64_t B = 2, H = 3, T = 333, D = 72;  // 64-row query blocks: 6 a head (the last 13 rows)
    AttentionSpec s;
    s.bf16_qk_pad = pad;
    s.batch = B;
    s.heads = H;
    s.q_len = s.kv_len = T;
    s.head_dim = D;
    s.compute = compute;
    s.q_block = 64;
    s.out = AttnLayout::bthd(T, D, H, H * D);
    const size_t esz = compute == DType::BF16 ? 2 : 4, plane = size_t(B * H * T * D) * esz;
    const std::vector<float> qkv = kt::randv(B * T * 3 * H * D, 31, -1.f, 1.f);
    const AttnLayout rows = AttnLayout::bthd(T, D, H, 3 * H * D);
    std::vector<char> planes(3 * plane);
    for (int p = 0; p < 3; ++p)
      attention_to_dense(qkv.data() + p * H * D, rows, B, H, T, D, compute, planes.data() + p * plane);
    const char *q = planes.data(), *k = q + plane, *v = k + plane;

    const Attention whole(s);
    REQUIRE(whole.tasks() == B * H * 6);
    std::vector<float> want(size_t(B * T * H * D), NAN);
    whole.run_dense(q, k, v, want.data(), nullptr);

    // Two callers (two Attention objects, as two processes have): the first takes 10 tasks,
    // the second the rest; then a third finds none left and writes nothing.
    const int64_t total = whole.tasks();
    std::atomic<int64_t> next{0};
    std::vector<std::atomic<int>> finished(static_cast<size_t>(total));
    std::vector<float> got(want.size(), NAN);
    CountingQueue first(next, total, 10, finished), second(next, total, total, finished), third(next, total, total, finished);
    Attention(s).run_dense(q, k, v, got.data(), first);
    CHECK(next.load() == 10);
    Attention(s).run_dense(q, k, v, got.data(), second);
    const std::vector<float> after_two = got;
    Attention(s).run_dense(q, k, v, got.data(), third);
    INFO(dtype_name(compute) << (pad == QkPad::On ? ", Q and K padded" : ""));
    CHECK(std::memcmp(got.data(), want.data(), want.size() * 4) == 0);
    CHECK(std::memcmp(got.data(), after_two.data(), got.size() * 4) == 0);
    int64_t once = 0;
    for (const auto& f : finished) once += f.load() == 1;
    CHECK(once == total);

    // Only the first caller's tasks: its rows written, the others' left as they were.
    std::atomic<int64_t> next2{0};
    std::vector<std::atomic<int>> finished2(static_cast<size_t>(total));
    std::vector<float> part(want.size(), NAN);
    CountingQueue only(next2, total, 10, finished2);
    Attention(s).run_dense(q, k, v, part.data(), only);
    int64_t written = 0;
    for (float x : part) written += !std::isnan(x);
    CHECK(written == (333 + 4 * 64) * D);  // tasks 0..9: batch 0's head 0 (6 blocks), head 1's first 4

    CHECK_THROWS_WITH(whole.run_dense(q, k, v, got.data(), *std::make_unique<BadQueue>(total)),
                      Catch::Contains("handed out task " + std::to_string(total)));
  }
}
