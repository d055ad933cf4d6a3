#include "parallel/shared_feed_forward.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <vector>

#include "parallel/process_group.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

constexpr size_t kLine = 64;
size_t round_up(size_t n) { return (n + kLine - 1) / kLine * kLine; }

// What each rank says about its feed-forward when one is made (all-gathered).
struct RankShape {
  int64_t rows = 0, batch = 0, threads = 1, whole = 0;
};

// A window's parts, the same on every rank of the group: the header line (the owner's rows and
// batch for this use), the two task counters (claimed, finished: a line each), then h, x and the
// gate, each on its own line.
struct Layout {
  size_t header_at = 0, claimed_at = kLine, finished_at = 2 * kLine;
  size_t h_at = 0, x_at = 0, gate_at = 0, bytes = 0;
  int64_t block = 0;  // rows a task
};

struct Header {
  int64_t rows, batch;
};

std::atomic<uint64_t>& counter(char* win, size_t at) { return *reinterpret_cast<std::atomic<uint64_t>*>(win + at); }

int64_t tasks_of(int64_t rows, int64_t batch, int64_t block) { return batch * ((rows + block - 1) / block); }

}  // namespace

ShareFfn parse_share_ffn(const std::string& v) {
  if (v == "auto") return ShareFfn::Auto;
  if (v == "on") return ShareFfn::On;
  if (v == "off") return ShareFfn::Off;
  DIT_FAIL("--share-ffn: '" << v << "' is not one of auto, on, off");
}

bool share_ffn_wanted(ShareFfn mode, int threads) {
  return mode == ShareFfn::On || (mode == ShareFfn::Auto && threads <= kAutoShareMaxThreads);
}

class FeedForwardSharing {
 public:
  FeedForwardSharing(std::shared_ptr<ProcessGroup> g, ShareFfn mode, std::function<void()> before_own_task)
      : g_(std::move(g)), mode_(mode), before_own_task_(std::move(before_own_task)) {}

  // Collective: every rank's shape; whether the rows are shared (the same answer everywhere) and
  // the window's layout and the row counts of every rank's tasks if so.
  bool prepare(const FeedForwardParts& p, Layout* L, std::vector<int64_t>* row_counts) {
    if (mode_ == ShareFfn::Off || g_->size() == 1) return false;
    if (!g_->uses_shared_memory()) {  // the replica spans machines (or --transport tcp): no windows
      warn_once("its ranks do not share one machine's memory");
      return false;
    }
    const FeedForwardShape& s = p.shape;
    RankShape mine{s.rows, s.batch, omp_get_max_threads(), p.w1 && p.w2 ? 1 : 0};
    std::vector<RankShape> all(size_t(g_->size()));
    g_->all_gather_bytes(&mine, all.data(), sizeof(RankShape));
    int64_t max_rows = 0, batch = 0, threads = 1;
    bool whole = true;
    for (const RankShape& r : all) {
      max_rows = std::max(max_rows, r.rows);
      batch = std::max(batch, r.batch);
      threads = std::max(threads, r.threads);
      whole = whole && r.whole;
    }
    if (!share_ffn_wanted(mode_, int(threads))) return false;
    if (!whole || max_rows == 0) {
      warn_once(whole ? "no rank has token rows" : "its weights are split by tensor parallelism");
      return false;
    }
    // About 4 tasks a rank, of at least 64 rows a thread, at most 1024: bf16 matmuls of 128 rows
    // on one thread took 4% longer than of 1024, of 256 no longer (docs/benchmarks.md).
    const int64_t per_rank = batch * max_rows;
    L->block = std::clamp<int64_t>((per_rank / 4 + 15) / 16 * 16, 64 * threads, 1024);
    const size_t esz = dtype_size(s.input);
    L->h_at = 3 * kLine;
    L->x_at = L->h_at + round_up(size_t(batch * max_rows * s.dim) * esz);
    L->gate_at = L->x_at + round_up(size_t(batch * max_rows * s.dim) * 4);
    L->bytes = L->gate_at + round_up(size_t(batch * s.dim) * 4);
    if (!g_->ensure_window(L->bytes)) {  // collective
      warn_once(g_->window_note());
      return false;
    }
    row_counts->clear();
    row_counts->push_back(L->block);
    for (const RankShape& r : all)  // each rank's last task of an item (all of it when shorter than a block)
      if (r.rows % L->block != 0) row_counts->push_back(r.rows % L->block);
    std::sort(row_counts->begin(), row_counts->end());
    row_counts->erase(std::unique(row_counts->begin(), row_counts->end()), row_counts->end());
    // The hidden rows of one task, shared by the feed-forwards (one runs at a time).
    const size_t need = size_t(L->block * s.hidden_dim);
    if (!hidden_.defined() || hidden_.dtype() != s.hidden || size_t(hidden_.numel()) < need)
      hidden_ = Tensor::empty({int64_t(need)}, s.hidden);
    return true;
  }

  ProcessGroup& group() { return *g_; }
  // With --share-ffn on, why the rows are not shared: once, by the group's rank 0.
  void warn_once(const std::string& why) {
    if (mode_ != ShareFfn::On || g_->rank() != 0 || warned_) return;
    warned_ = true;
    std::fprintf(stderr, "warning: --share-ffn on: the feed-forward runs on each rank's own rows (%s)\n", why.c_str());
  }
  Tensor& hidden() { return hidden_; }
  void before_own_task() const {
    if (before_own_task_) before_own_task_();
  }
  void add_rows_for_others(int64_t n) {
    rows_for_others_ += uint64_t(n);
    profile::add_rows_for_others(uint64_t(n));
  }
  uint64_t rows_for_others() const { return rows_for_others_; }

 private:
  std::shared_ptr<ProcessGroup> g_;
  ShareFfn mode_;
  std::function<void()> before_own_task_;
  uint64_t rows_for_others_ = 0;
  bool warned_ = false;
  Tensor hidden_;
};

std::shared_ptr<FeedForwardSharing> make_feed_forward_sharing(std::shared_ptr<ProcessGroup> group, ShareFfn mode,
                                                              std::function<void()> before_own_task) {
  return std::make_shared<FeedForwardSharing>(std::move(group), mode, std::move(before_own_task));
}

uint64_t rows_for_others(const FeedForwardSharing& sharing) { return sharing.rows_for_others(); }

namespace {

class SharedFeedForward final : public FeedForward {
 public:
  SharedFeedForward(std::shared_ptr<FeedForwardSharing> sh, const FeedForwardParts& p, const Layout& L,
                    const std::vector<int64_t>& row_counts)
      : sh_(std::move(sh)), g_(sh_->group()), s_(p.shape), L_(L) {
    for (const int64_t n : row_counts) {
      LinearSpec s1;
      s1.rows = n;
      s1.in = s_.dim;
      s1.out = s_.hidden_dim;
      s1.act = Act::GeluTanh;
      s1.input = s_.input;
      s1.output = s_.hidden;
      LinearSpec s2;
      s2.rows = n;
      s2.in = s_.hidden_dim;
      s2.out = s_.dim;
      s2.gated_residual = true;
      s2.input = s_.hidden;
      ops_.emplace(n, Ops{Linear(s1, *p.w1), Linear(s2, *p.w2)});
    }
  }
  void run(const float* h, float* x, const float* gate) override { run_any(h, x, gate); }
  void run(const uint16_t* h, float* x, const float* gate) override { run_any(h, x, gate); }

 private:
  struct Ops {
    Linear fc1, fc2;
  };

  void run_any(const void* h, float* x, const float* gate) {
    const int64_t B = s_.batch, T = s_.rows, D = s_.dim;
    char* me;
    {
      profile::Scope pw(profile::Cat::Waiting);  // until every rank has released the window's last use
      me = reinterpret_cast<char*>(g_.window_begin());
    }
    if (T > 0) {
      profile::Scope pc(profile::Cat::Communication);
      std::memcpy(me + L_.h_at, h, size_t(B * T * D) * dtype_size(s_.input));
      std::memcpy(me + L_.x_at, x, size_t(B * T * D) * 4);
      std::memcpy(me + L_.gate_at, gate, size_t(B * D) * 4);
    }
    *reinterpret_cast<Header*>(me + L_.header_at) = Header{T, B};
    counter(me, L_.claimed_at).store(0, std::memory_order_relaxed);
    counter(me, L_.finished_at).store(0, std::memory_order_relaxed);
    g_.window_publish();
    run_tasks(me, /*mine=*/true);
    for (int k = 1; k < g_.size(); ++k) {
      const int j = (g_.rank() + k) % g_.size();
      {
        profile::Scope pw(profile::Cat::Waiting);
        g_.window_peer(j);  // its rows published
      }
      run_tasks(reinterpret_cast<char*>(g_.window_shared(j)), false);
    }
    if (T > 0) {
      {
        profile::Scope pw(profile::Cat::Waiting);  // my tasks that other ranks took
        g_.window_wait(counter(me, L_.finished_at), uint64_t(tasks_of(T, B, L_.block)));
      }
      profile::Scope pc(profile::Cat::Communication);
      std::memcpy(x, me + L_.x_at, size_t(B * T * D) * 4);
    }
    g_.window_release();
  }

  // Claims and computes the tasks left in window `win` until none are.
  void run_tasks(char* win, bool mine) {
    const Header hd = *reinterpret_cast<const Header*>(win + L_.header_at);
    const int64_t per_item = (hd.rows + L_.block - 1) / L_.block, total = hd.batch * per_item;
    std::atomic<uint64_t>& claimed = counter(win, L_.claimed_at);
    std::atomic<uint64_t>& finished = counter(win, L_.finished_at);
    const int64_t D = s_.dim;
    for (;;) {
      const uint64_t t = claimed.fetch_add(1, std::memory_order_relaxed);
      if (t >= uint64_t(total)) return;
      if (mine) sh_->before_own_task();
      const int64_t b = int64_t(t) / per_item, r0 = (int64_t(t) % per_item) * L_.block;
      const int64_t n = std::min(L_.block, hd.rows - r0), row = b * hd.rows + r0;
      const auto it = ops_.find(n);
      DIT_CHECK(it != ops_.end(), "shared feed-forward: no linears for a task of " << n << " rows");
      const char* h = win + L_.h_at + size_t(row * D) * dtype_size(s_.input);
      float* x = reinterpret_cast<float*>(win + L_.x_at) + row * D;
      const float* gate = reinterpret_cast<const float*>(win + L_.gate_at) + b * D;
      task(it->second, h, x, gate);
      if (!mine) sh_->add_rows_for_others(n);
      finished.fetch_add(1, std::memory_order_release);  // x's rows written before the count
    }
  }

  // x += gate ⊙ (GELU-tanh(h·W1ᵀ + b1)·W2ᵀ + b2) over one task's rows.
  void task(const Ops& o, const char* h, float* x, const float* gate) {
    Tensor& m = sh_->hidden();
    if (s_.hidden == DType::BF16) {
      if (s_.input == DType::BF16)
        o.fc1.run(reinterpret_cast<const uint16_t*>(h), m.bf16());
      else
        o.fc1.run(reinterpret_cast<const float*>(h), m.bf16());
      o.fc2.run(m.bf16(), x, gate);
    } else {
      DIT_CHECK(s_.input == DType::F32, "shared feed-forward: bf16 rows for an f32 hidden layer");
      o.fc1.run(reinterpret_cast<const float*>(h), m.f32());
      o.fc2.run(m.f32(), x, gate);
    }
  }

  std::shared_ptr<FeedForwardSharing> sh_;
  ProcessGroup& g_;
  FeedForwardShape s_;
  Layout L_;
  std::map<int64_t, Ops> ops_;  // by a task's rows
};

}  // namespace

std::unique_ptr<FeedForward> make_shared_feed_forward(const std::shared_ptr<FeedForwardSharing>& sharing,
                                                      FeedForwardParts parts) {
  Layout L;
  std::vector<int64_t> row_counts;
  if (!sharing || !sharing->prepare(parts, &L, &row_counts)) return make_local_feed_forward(std::move(parts));
  return std::make_unique<SharedFeedForward>(sharing, parts, L, row_counts);
}

}  // namespace dit
