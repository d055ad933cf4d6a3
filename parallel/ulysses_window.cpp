// Ulysses on one machine through the group's shared-memory windows (parallel/shm_exchange.h,
// "Windows"; docs/transport.md). The all-to-all copies each byte twice: into the sender's
// staging slot, and out of it into the receiver's rows. Here each rank's q, k, v rows lie in
// its window, where the QKV projection wrote them (qkv_destination()), and every rank reads its
// heads of the others' tokens from there straight into the planes its attention reads, in its
// own window: one pass, which in bf16 is the conversion the kernels need anyway. A layout with
// a ring comes here too when its whole sequence-parallel group is on one machine (uly_ is then
// that group: parallel_attention.cpp, prepare).
//
// The attention's tasks (a query block of one batch element and head) are shared: each rank
// takes its own heads' tasks one at a time from a counter in its window, then, when it has no
// more, those left in the other ranks' windows, reading their planes and writing the output
// rows into their windows. A rank whose core is slowed by its neighbours (a VM's vCPUs, a busy
// machine) is helped rather than waited for; on a quiet machine each rank computes its own. A
// task's rows are the same whoever computes them (the same kernels on the same planes). Every
// rank then reads its tokens of every rank's heads from the windows' outputs.
//
// One forward is one use of the window, published in three stages, so that nobody waits for
// anyone before it has something to do:
//   window_begin (qkv_destination, or here)  until every rank has read this rank's last output
//   rows in -> publish -> every rank's rows of my heads into my planes -> counters reset
//   -> publish -> my tasks, then the others' -> until my tasks are all finished -> publish
//   -> read every rank's outputs -> release
// The same bits as the all-to-all path in bf16 (the same values reach the same kernels; the
// outputs are rounded by their reader instead of their writer); in f32 the planes are dense,
// as the kernels' own copy of K and V makes them from 2048 tokens up.
#include <algorithm>
#include <atomic>

#include "parallel/sequence_parallel_attention.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"

namespace dit::detail {

namespace {

constexpr size_t kLine = 64;

size_t round_up(size_t n) { return (n + kLine - 1) / kLine * kLine; }

// Counter `which` of a window's tasks part: 0 claimed, 1 finished, a cache line each.
std::atomic<uint64_t>& counter(char* tasks, int which) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(tasks + size_t(which) * kLine);
}

// The tasks of one rank's attention, claimed by whichever rank's threads come: the counters
// lie in that rank's window.
class WindowTasks final : public AttentionTaskQueue {
 public:
  WindowTasks(char* tasks, int64_t total)
      : claimed_(counter(tasks, 0)), finished_(counter(tasks, 1)), total_(uint64_t(total)) {}
  int64_t claim() noexcept override {
    const uint64_t t = claimed_.fetch_add(1, std::memory_order_relaxed);
    return t < total_ ? int64_t(t) : -1;
  }
  // The task's output rows are written before the count (release): the owner reads them after
  // it has seen every task finished (acquire).
  void finished(int64_t) noexcept override { finished_.fetch_add(1, std::memory_order_release); }

 private:
  std::atomic<uint64_t>& claimed_;
  std::atomic<uint64_t>& finished_;
  uint64_t total_;
};

// f32 rows rounded to bf16 and widened back (what a bf16 exchange of them delivers), through a
// buffer on the stack: to_bf16's rounding, as narrow_cols'.
void round_cols(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t width) {
  parallel_for(rows, size_t(rows * width) * 4 >= kParallelCopyBytes, [&](int64_t r) {
    uint16_t tmp[256];
    for (int64_t i = 0; i < width; i += 256) {
      const int64_t n = std::min<int64_t>(256, width - i);
      to_bf16(src + r * src_stride + i, tmp, n);
      for (int64_t e = 0; e < n; ++e) dst[r * dst_stride + i + e] = bf16_to_f32(tmp[e]);
    }
  });
}

}  // namespace

// Where the parts lie in each rank's window and the room it needs, the same on every rank of
// the group (ensure_window is collective), each part on its own cache line: any rank's q, k, v
// rows, any rank's planes and output, and the two task counters.
SequenceParallelAttention::UlyssesWindowLayout SequenceParallelAttention::ulysses_window_layout() const {
  const size_t row_esz = uly16_ ? 2 : 4;  // rows in qkv_dtype()
  size_t rows = 0, hmax = 0;
  for (int j = 0; j < U_; ++j) {
    rows = std::max(rows, size_t(B_ * tokens_of(j).size() * 3 * H_ * d_) * row_esz);
    hmax = std::max(hmax, size_t(heads_of(j).size()));
  }
  UlyssesWindowLayout w{};
  w.planes_at = round_up(rows);
  w.out_at = w.planes_at + round_up(3 * size_t(B_ * Tg_ * d_) * hmax * esz_);
  w.tasks_at = w.out_at + round_up(size_t(B_ * Tg_ * d_) * hmax * 4);
  w.bytes = w.tasks_at + 2 * kLine;
  return w;
}

void* SequenceParallelAttention::qkv_destination() {
  if (!prepared_ || !uly_window_) return nullptr;
  DIT_CHECK(!qkv_in_window_, "ulysses attention: qkv_destination() twice without a forward");
  {
    profile::Scope pw(profile::Cat::Waiting);  // until every rank has read this rank's last output
    uly_win_ = reinterpret_cast<char*>(uly_->window_begin());
  }
  qkv_in_window_ = true;
  return uly_win_;
}

void SequenceParallelAttention::ulysses_window(QkvRows qkv, OutRows out) {
  window_scatter(qkv);  // -> my planes [3, B, Hu, Tg, d], published
  window_attend();      // -> every rank's output [B, Tg, Hj, d] in its window, mine finished
  window_gather(out);
}

// This rank's rows [B, T, 3, H, d] in the window (copied in unless the projection wrote them
// there), published; then every rank's tokens of my heads read out of its window into my
// planes, my task counters reset, and the planes published.
void SequenceParallelAttention::window_scatter(QkvRows qkv) {
  const size_t n = size_t(B_ * T_ * 3 * H_ * d_);
  if (qkv_in_window_) {
    DIT_CHECK(qkv.p == uly_win_ && qkv.bf16 == uly16_,
              "ulysses attention: forward() after qkv_destination() must be given that pointer, in "
                  << (uly16_ ? "bf16" : "f32"));
    qkv_in_window_ = false;
  } else {  // the caller's own buffer: into the window, in its type (bf16 rounds as the kernels would)
    {
      profile::Scope pw(profile::Cat::Waiting);
      uly_win_ = reinterpret_cast<char*>(uly_->window_begin());
    }
    if (qkv.bf16 == uly16_) {
      const size_t bytes = n * (uly16_ ? 2 : 4);
      copy_block_parallel(static_cast<const char*>(qkv.p), kFlat, 0, uly_win_, kFlat, 0, bytes);
    } else {
      DIT_CHECK(!qkv.bf16, "ulysses attention: bf16 q, k, v with an f32 exchange");
      const float* x = qkv.f32();
      uint16_t* y = reinterpret_cast<uint16_t*>(uly_win_);
      parallel_split(n, 4, [&](size_t first, size_t len) { to_bf16(x + first, y + first, int64_t(len)); });
    }
  }
  uly_->window_publish();
  read_qkv_block(uly_win_, u_);  // my own tokens first: no wait
  for (int k = 1; k < U_; ++k) {
    const int j = (u_ + k) % U_;  // the ranks do not all read one window at once
    const void* rows;
    {
      profile::Scope pw(profile::Cat::Waiting);
      rows = uly_->window_peer(j);
    }
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(B_ * tokens_of(j).size() * 3 * Hu_ * d_) * (uly16_ ? 2 : 4));
    read_qkv_block(rows, j);
  }
  char* tasks = uly_win_ + tasks_at_;  // nobody claims before the publication below
  counter(tasks, 0).store(0, std::memory_order_relaxed);
  counter(tasks, 1).store(0, std::memory_order_relaxed);
  uly_->window_publish();
}

// Rank j's rows [B, Tj, 3, H, d] (the window's type) -> its tokens of my heads in my planes
// (q, k, v each [B, Hu, Tg, d] in the compute type).
void SequenceParallelAttention::read_qkv_block(const void* rows, int j) {
  const int64_t tj = tokens_of(j).size(), t0 = tokens_of(j).begin - tokens_of(0).begin;
  if (tj == 0) return;
  pack_planes(QkvRows{rows, uly16_}, heads_of(u_), uly_win_ + planes_at_, Tg_, t0, tj);
}

// My heads' tasks, then what the other ranks have left of theirs (each once its planes are
// published), then until every task of mine is finished, by whichever rank took it.
void SequenceParallelAttention::window_attend() {
  if (Tg_ == 0) return;
  for (int k = 0; k < U_; ++k) {
    const int j = (u_ + k) % U_;
    if (heads_of(j).size() == 0) continue;
    char* win;
    if (j == u_) {
      win = uly_win_;
    } else {
      profile::Scope pw(profile::Cat::Waiting);
      uly_->window_peer(j);  // its planes and reset counters
      win = reinterpret_cast<char*>(uly_->window_shared(j));
    }
    const Attention& a = window_attention(j);
    const size_t plane = size_t(B_ * heads_of(j).size() * Tg_ * d_) * esz_;
    const char* planes = win + planes_at_;
    WindowTasks tasks(win + tasks_at_, a.tasks());
    a.run_dense(planes, planes + plane, planes + 2 * plane, reinterpret_cast<float*>(win + out_at_), tasks);
  }
  if (Hu_ == 0) return;
  profile::Scope pw(profile::Cat::Waiting);
  uly_->window_wait(counter(uly_win_ + tasks_at_, 1), uint64_t(window_attention(u_).tasks()));
}

// Every rank's output [B, Tg, Hj, d] (f32, in its window) -> my tokens of its heads in out
// [B, T, H, d]; with a bf16 exchange the other ranks' heads rounded to bf16 (into an f32 out:
// and widened back), as their all-to-all delivers them, and my own kept in f32 for an f32 out.
void SequenceParallelAttention::window_gather(OutRows out) {
  uly_->window_publish();
  if (Tg_ > 0) read_out_block(reinterpret_cast<const float*>(uly_win_ + out_at_), u_, out);
  for (int k = 1; k < U_ && Tg_ > 0; ++k) {
    const int j = (u_ + k) % U_;
    const float* block;
    {
      profile::Scope pw(profile::Cat::Waiting);
      block = reinterpret_cast<const float*>(reinterpret_cast<const char*>(uly_->window_peer(j)) + out_at_);
    }
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(B_ * T_ * heads_of(j).size() * d_) * 4);
    read_out_block(block, j, out);
  }
  uly_->window_release();
}

void SequenceParallelAttention::read_out_block(const float* block, int j, OutRows out) {
  const int64_t hjd = heads_of(j).size() * d_, hj0 = heads_of(j).begin * d_;
  const int64_t t0 = tokens_of(u_).begin - tokens_of(0).begin;
  for (int64_t b = 0; b < B_; ++b) {
    const float* x = block + (b * Tg_ + t0) * hjd;
    const int64_t at = b * T_ * H_ * d_ + hj0;
    if (out.bf16)
      narrow_cols(out.b16() + at, H_ * d_, x, hjd, T_, hjd);
    else if (uly16_ && j != u_)
      round_cols(out.f32() + at, H_ * d_, x, hjd, T_, hjd);
    else
      copy_cols(out.f32() + at, H_ * d_, x, hjd, T_, hjd);
  }
}

}  // namespace dit::detail
