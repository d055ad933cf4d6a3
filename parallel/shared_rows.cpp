#include "parallel/shared_rows.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

#include "parallel/process_group.h"
#include "runtime/environment.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

constexpr size_t kLine = 64;
size_t round_up(size_t n) { return (n + kLine - 1) / kLine * kLine; }

// A window's fixed parts, the same on every rank of the group: the header line (the owner's rows
// and batch for this use), the two task counters (claimed, finished: a line each); the op's
// rows follow (RowsPlan), then a byte a task: whether another rank computed it.
constexpr size_t kHeaderAt = 0, kClaimedAt = kLine, kFinishedAt = 2 * kLine, kRowsAt = 3 * kLine;

// What each rank says about an op when it is planned (all-gathered).
struct RankShape {
  int64_t rows = 0, batch = 0, threads = 1, whole = 0;
  int64_t block = 0, tail = -1;  // DIT_SHARE_ROWS_BLOCK (0: none), DIT_SHARE_ROWS_TAIL (-1: none)
  int64_t chunks = -1;           // DIT_SHARE_ROWS_CHUNKS (-1: none)
};

struct Header {
  int64_t rows, batch;
};

std::atomic<uint64_t>& counter(char* win, size_t at) { return *reinterpret_cast<std::atomic<uint64_t>*>(win + at); }

}  // namespace

int RowTaskList::tail(int64_t block, int halvings, int64_t* pieces) {
  int n = 0;
  int64_t left = block;
  for (int i = 0; i < std::min(halvings, 6) && left > 16; ++i) {
    const int64_t p = (left / 2 + 15) / 16 * 16;  // half of what is left, rounded up to 16 rows
    if (p >= left) break;
    pieces[n++] = p;
    left -= p;
  }
  if (n > 0) pieces[n++] = left;
  return n;
}

RowTaskList::RowTaskList(int64_t rows, int64_t batch, int64_t block, int halvings)
    : rows_(rows), batch_(batch), block_(block), per_item_((rows + block - 1) / block), count_(batch * per_item_) {
  if (batch > 0 && rows >= block) npieces_ = tail(block, halvings, pieces_);
  if (npieces_ > 0) count_ += npieces_ - 1;
}

// Items 0 .. batch-2 and, unsplit, the last: task k of an item is rows [k·block, ...). Split, the
// last item's tasks are its whole ones but the last (f - 1 of them), its shorter one (if any),
// then the pieces of rows [(f - 1)·block, f·block), in order.
RowTask RowTaskList::at(int64_t t) const {
  const int64_t last = (batch_ - 1) * per_item_;  // the last item's first task
  if (npieces_ == 0 || t < last) {
    const int64_t k = t % per_item_;
    return RowTask{t / per_item_, k * block_, std::min(block_, rows_ - k * block_)};
  }
  const int64_t b = batch_ - 1, f = rows_ / block_, rem = rows_ % block_;
  int64_t j = t - last;  // the task's place in the last item
  if (j < f - 1) return RowTask{b, j * block_, block_};
  j -= f - 1;
  if (rem > 0 && j-- == 0) return RowTask{b, f * block_, rem};
  int64_t row0 = (f - 1) * block_;
  for (int i = 0; i < j; ++i) row0 += pieces_[i];
  return RowTask{b, row0, pieces_[j]};
}

int64_t RowTaskList::chunk(int64_t t, int64_t most) const {
  int64_t k = 1;
  while (k * 2 <= most) k *= 2;
  for (; k > 1; k /= 2) {
    if (t + k > count_) continue;
    // Whole tasks of one item are consecutive, in row order: the first and the last tell.
    const RowTask a = at(t), z = at(t + k - 1);
    if (a.rows == block_ && z.rows == block_ && z.item == a.item && z.row0 == a.row0 + (k - 1) * block_) return k;
  }
  return 1;
}

int64_t RowTaskList::most_chunk() const {
  const int64_t whole = rows_ / block_;  // whole tasks of an item (the tail may split one of them)
  int64_t k = 1;
  while (k * 2 <= std::min(whole, count_ / 2)) k *= 2;
  return k;
}

ShareRows parse_share_rows(const std::string& v) {
  if (v == "auto") return ShareRows::Auto;
  if (v == "on") return ShareRows::On;
  if (v == "off") return ShareRows::Off;
  DIT_FAIL("--share-rows: '" << v << "' is not one of auto, on, off");
}

bool share_rows_wanted(ShareRows mode, int threads) {
  return mode == ShareRows::On || (mode == ShareRows::Auto && threads <= kAutoShareMaxThreads);
}

int64_t share_rows_block(int64_t rows, int64_t override_rows) {
  if (override_rows > 0) return override_rows;
  // On the 16-core machine (docs/benchmarks.md, twenty-fifth session), 8 ranks of 2 threads at
  // 1024 tokens: tasks of 64 rows (4 a rank) ran 1.05-1.12x one process, of 128 (2 a rank; the
  // earlier floor of 64 rows a thread) 0.91-1.01x; 8 ranks of one thread with tasks of 32 rows
  // waited less than with 64 but did not step faster.
  return std::clamp<int64_t>((rows / 4 + 15) / 16 * 16, 64, 1024);
}

int64_t parse_share_rows_block(const std::string& what, const std::string& value) {
  int64_t v = 0;
  size_t used = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != value.size() || v < 16 || v > 4096)
    DIT_FAIL(what << ": '" << value << "' (expected rows a task, 16 to 4096)");
  return v;
}

int parse_share_rows_tail(const std::string& what, const std::string& value) {
  if (value.size() != 1 || value[0] < '0' || value[0] > '6')
    DIT_FAIL(what << ": '" << value << "' (expected halvings of the last task, 0 to 6)");
  return value[0] - '0';
}

int parse_share_rows_chunks(const std::string& what, const std::string& value) {
  if (value != "0" && value != "1") DIT_FAIL(what << ": '" << value << "' (expected 0 or 1: a rank's own tasks in chunks)");
  return value[0] - '0';
}

int share_rows_chunks_override() {
  const char* v = env_nonempty("DIT_SHARE_ROWS_CHUNKS");
  return v ? parse_share_rows_chunks("DIT_SHARE_ROWS_CHUNKS", v) : -1;
}

int share_rows_tail_override() {
  const char* v = env_nonempty("DIT_SHARE_ROWS_TAIL");
  return v ? parse_share_rows_tail("DIT_SHARE_ROWS_TAIL", v) : -1;
}

int64_t share_rows_block_override() {
  const char* v = env_nonempty("DIT_SHARE_ROWS_BLOCK");
  return v ? parse_share_rows_block("DIT_SHARE_ROWS_BLOCK", v) : 0;
}

RowSharing::RowSharing(std::shared_ptr<ProcessGroup> g, ShareRows mode, std::function<void()> before_own_task)
    : g_(std::move(g)), mode_(mode), before_own_task_(std::move(before_own_task)) {}

bool RowSharing::plan(const RowsShape& s, RowsPlan* P) {
  if (mode_ == ShareRows::Off || g_->size() == 1) return false;
  if (!g_->uses_shared_memory()) {  // the replica spans machines (or --transport tcp): no windows
    warn_once(s, "its ranks do not share one machine's memory");
    return false;
  }
  RankShape mine{s.rows,
                 s.batch,
                 omp_get_max_threads(),
                 s.whole ? 1 : 0,
                 share_rows_block_override(),
                 share_rows_tail_override(),
                 share_rows_chunks_override()};
  std::vector<RankShape> all(size_t(g_->size()));
  g_->all_gather_bytes(&mine, all.data(), sizeof(RankShape));
  int64_t max_rows = 0, batch = 0, threads = 1, block = 0, tail = -1, chunks = -1;
  bool whole = true;
  for (const RankShape& r : all) {
    max_rows = std::max(max_rows, r.rows);
    batch = std::max(batch, r.batch);
    threads = std::max(threads, r.threads);
    block = std::max(block, r.block);
    tail = std::max(tail, r.tail);
    chunks = std::max(chunks, r.chunks);
    whole = whole && r.whole;
  }
  if (!share_rows_wanted(mode_, int(threads))) return false;
  if (!whole || max_rows == 0) {
    warn_once(s, whole ? "no rank has token rows" : s.whole ? "another rank's weights cannot be shared" : s.not_whole);
    return false;
  }
  P->block = share_rows_block(batch * max_rows, block);
  P->tail = tail >= 0 ? int(tail) : kTailHalvings;
  P->chunks = chunks >= 0 ? chunks == 1 : kOwnChunks;
  P->in_at = kRowsAt;
  P->out_at = P->in_at + round_up(size_t(batch * max_rows) * s.in_row);
  P->item_at = P->out_at + round_up(size_t(batch * max_rows) * s.out_row);
  P->helped_at = P->item_at + round_up(size_t(batch) * s.item);
  const size_t bytes = P->helped_at + round_up(size_t(RowTaskList(max_rows, batch, P->block, P->tail).count()));
  if (!g_->ensure_window(bytes)) {  // collective
    warn_once(s, g_->window_note());
    return false;
  }
  std::set<int64_t> counts{P->block};
  for (const RankShape& r : all) {  // each rank's shorter last task of an item, its tail's pieces, its chunks
    const RowTaskList list(r.rows, r.batch, P->block, P->tail);
    for (int64_t t = 0; t < list.count(); ++t) counts.insert(list.at(t).rows);
    for (int64_t k = 2; P->chunks && k <= list.most_chunk(); k *= 2) counts.insert(k * P->block);
  }
  P->task_rows.assign(counts.begin(), counts.end());
  return true;
}

Tensor& RowSharing::scratch(DType type, int64_t numel) {
  Tensor& t = scratch_[type == DType::BF16 ? 1 : 0];
  if (!t.defined() || t.numel() < numel) t = Tensor::empty({numel}, type);
  return t;
}

// In, out and item of [batch, rows] (item: [batch]): a rank's own memory, or its window.
struct RowSharing::Rows {
  const char* in;
  char* out;
  const char* item;
};

// My own tasks read and write my rows where they are (in, out, item); the others' tasks read
// and write theirs in their windows; the rows of my tasks another rank took come back from
// mine.
void RowSharing::run(const RowsShape& s, const RowsPlan& P, RowTasks& tasks, const void* in, void* out,
                     const void* item) {
  const int64_t B = s.batch, T = s.rows;
  const RowTaskList list(T, B, P.block, P.tail);
  const int64_t total = list.count();
  char* me;
  {
    profile::Scope pw(profile::Cat::Waiting);  // until every rank has released the window's last use
    me = reinterpret_cast<char*>(g_->window_begin());
  }
  if (T > 0) {
    profile::Scope pc(profile::Cat::Communication);
    std::memcpy(me + P.in_at, in, size_t(B * T) * s.in_row);
    if (s.adds) std::memcpy(me + P.out_at, out, size_t(B * T) * s.out_row);
    if (s.item) std::memcpy(me + P.item_at, item, size_t(B) * s.item);
    std::memset(me + P.helped_at, 0, size_t(total));
  }
  *reinterpret_cast<Header*>(me + kHeaderAt) = Header{T, B};
  counter(me, kClaimedAt).store(0, std::memory_order_relaxed);
  counter(me, kFinishedAt).store(0, std::memory_order_relaxed);
  g_->window_publish();
  run_tasks(s, P, tasks, me, Rows{static_cast<const char*>(in), static_cast<char*>(out), static_cast<const char*>(item)});
  for (int k = 1; k < g_->size(); ++k) {
    const int j = (g_->rank() + k) % g_->size();
    {
      profile::Scope pw(profile::Cat::Waiting);
      g_->window_peer(j);  // its rows published
    }
    char* win = reinterpret_cast<char*>(g_->window_shared(j));
    run_tasks(s, P, tasks, win, Rows{win + P.in_at, win + P.out_at, win + P.item_at}, /*helping=*/true);
  }
  if (T > 0) {
    {
      profile::Scope pw(profile::Cat::Waiting);  // my tasks that other ranks took
      g_->window_wait(counter(me, kFinishedAt), uint64_t(total));
    }
    profile::Scope pc(profile::Cat::Communication);
    for (int64_t t = 0; t < total; ++t) {
      if (!me[P.helped_at + size_t(t)]) continue;
      const RowTask k = list.at(t);
      const size_t at = size_t(k.item * T + k.row0) * s.out_row;
      std::memcpy(static_cast<char*>(out) + at, me + P.out_at + at, size_t(k.rows) * s.out_row);
    }
  }
  g_->window_release();
}

// Claims and computes the tasks left in window `win` until none are, on the owner's rows at
// `at` (mine: my own memory; helping: the window, each task marked as helped).
void RowSharing::run_tasks(const RowsShape& s, const RowsPlan& P, RowTasks& tasks, char* win, const Rows& at,
                           bool helping) {
  const Header hd = *reinterpret_cast<const Header*>(win + kHeaderAt);
  const RowTaskList list(hd.rows, hd.batch, P.block, P.tail);
  const int64_t total = list.count();
  std::atomic<uint64_t>& claimed = counter(win, kClaimedAt);
  std::atomic<uint64_t>& finished = counter(win, kFinishedAt);
  for (;;) {
    // Tasks [t, t + m): one at a time from another's window; from mine, a chunk (RowTaskList::chunk)
    // taken only if no one has claimed any of it meanwhile.
    uint64_t t = 0, m = 1;
    if (helping || !P.chunks) {
      t = claimed.fetch_add(1, std::memory_order_relaxed);
      if (t >= uint64_t(total)) return;
    } else {
      t = claimed.load(std::memory_order_relaxed);
      do {
        if (t >= uint64_t(total)) return;
        m = uint64_t(list.chunk(int64_t(t), (total - int64_t(t)) / 2));
      } while (!claimed.compare_exchange_weak(t, t + m, std::memory_order_relaxed));
    }
    if (!helping && before_own_task_) before_own_task_();
    const RowTask k = list.at(int64_t(t));
    const int64_t n = m == 1 ? k.rows : int64_t(m) * P.block, row = k.item * hd.rows + k.row0;
    DIT_CHECK(std::binary_search(P.task_rows.begin(), P.task_rows.end(), n),
              "shared rows (" << s.what << "): no linears for a task of " << n << " rows");
    tasks.task(n, at.in + size_t(row) * s.in_row, at.out + size_t(row) * s.out_row,
               s.item ? at.item + size_t(k.item) * s.item : nullptr);
    if (helping) {
      win[P.helped_at + t] = 1;
      rows_for_others_ += uint64_t(n);
      profile::add_rows_for_others(uint64_t(n));
    }
    finished.fetch_add(m, std::memory_order_release);  // the output rows and mark written before the count
  }
}

// With --share-rows on, why an op's rows are not shared: once per op kind, by the group's rank 0.
void RowSharing::warn_once(const RowsShape& s, const std::string& why) {
  if (mode_ != ShareRows::On || g_->rank() != 0 || !warned_.insert(s.what).second) return;
  std::fprintf(stderr, "warning: --share-rows on: %s runs on each rank's own rows (%s)\n", s.what, why.c_str());
}

}  // namespace dit
