// Row-wise work of a block shared among the ranks of a replica that are on one machine: the
// feed-forward (parallel/shared_feed_forward.h) and the self-attention's Q, K, V projection
// (parallel/shared_projection.h). The attention's tasks are shared the same way
// (parallel/ulysses_window.cpp).
//
// Every rank does the same arithmetic on its own rows, yet ranks finish at different times: the
// cores of a virtual machine run at different speeds (vCPUs sharing a host core), a machine is
// busy with other work. A row-wise op is split into tasks of `block` rows of one batch element
// (DIT_SHARE_ROWS_TAIL: the last few shorter, RowTaskList); each rank copies its rows (the op's
// input, the output rows when the op adds to them, a vector per batch element such as a gate)
// into its shared-memory window, takes its own tasks one at a time (DIT_SHARE_ROWS_CHUNKS=1: in
// chunks, RowTaskList::chunk) from a counter there and computes them on its own memory, then
// takes those left in the other ranks' windows one at a time, computing
// them with linears of its own over the same whole weights and writing the output rows in their
// windows (and marking the task there). A rank waits only for tasks of its own that another rank
// has taken, then copies their output rows back.
//
//   one use of the group's window per op:
//   window_begin -> input, output (if added to), vector, header, counters, marks -> publish ->
//   my tasks -> each other rank's, once it has published -> until mine are all finished ->
//   the rows of my tasks others took back -> release
//
// Each row's bits are the same whoever computes it: the same kernels over the same values
// (a matmul's row does not depend on how many rows it is given; tested). Off the window (the
// replica spans machines, or windows are turned off), under tensor parallelism and, with
// --share-rows auto, with more than kAutoShareMaxThreads threads a rank, the local form runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace dit {

class ProcessGroup;

// --share-rows: on (shared wherever it can be, and a warning where it cannot), off (always
// local), auto (as on where the ranks have at most kAutoShareMaxThreads threads each, else
// off). With one thread a rank, a core slower than the others slows its whole rank (the
// eighteenth session measured the same linears 1.5-2.6x apart on the 16-core machine); with
// many, a rank's speed is its cores' average and its layouts were within 0.97-1.04x of one
// process without sharing, while its tasks would be coarse (512 rows and more) and unmeasured.
enum class ShareRows { Auto, On, Off };
constexpr int kAutoShareMaxThreads = 4;
ShareRows parse_share_rows(const std::string& v);  // "auto" | "on" | "off"; throws otherwise
// Whether `mode` shares the rows of ranks with `threads` threads each (the most of any rank),
// where the weights, the machine and the windows allow it.
bool share_rows_wanted(ShareRows mode, int threads);
// Rows a task of a shared op, for ranks of at most `rows` rows each (batch x rows per element):
// about 4 tasks a rank, at least 64 rows, at most 1024, a multiple of 16 (whatever the ranks'
// threads: oneDNN splits a matmul's columns among them); `override_rows` > 0 replaces the rule.
int64_t share_rows_block(int64_t rows, int64_t override_rows = 0);
// Halvings of the tail (RowTaskList): the last whole task of a rank's rows split into about a
// half, a quarter, ... of it (multiples of 16 rows), so that the ranks' last tasks, whose end
// the others wait for, are short. None by default: on the 2-core VM two halvings cut the waiting
// (cfg2 1.1 -> 0.4% of the step) without a faster step (docs/benchmarks.md, twenty-sixth
// session); unmeasured where it waits most, 8 ranks of one thread on many cores.
constexpr int kTailHalvings = 0;
// The environment's DIT_SHARE_ROWS_TAIL (a measurement knob: halvings, 0 to 6, in place of
// kTailHalvings; 0: no split), parsed by parse_share_rows_tail; -1 where unset or empty.
int share_rows_tail_override();
int parse_share_rows_tail(const std::string& what, const std::string& value);  // throws naming `what`
// Whether a rank takes its own tasks in chunks: while it has more than two left, half of them
// (the largest power of two of whole tasks of one batch item, run as one matmul over their
// rows), then one at a time; the others take a rank's tasks one at a time. Each task streams
// the op's whole weights once, so four 64-row tasks read them four times, a chunk of two and two
// single tasks three times. Off by default: on the 2-core VM (docs/benchmarks.md,
// twenty-seventh session) chunks shortened cfg2's f32 step at 256 tokens (1.74 -> 1.82x one
// thread; its linears 1.14 -> 1.09x the one thread's) and left 1024 tokens level, but with one
// core slowed by a busy loop cfg2's step took 5-8% longer: a slow rank's chunk cannot be taken
// from it, and uneven cores are what the sharing is for (the 16-core machine's ran 1.5-2.6x
// apart). Unmeasured on many cores.
constexpr bool kOwnChunks = false;
// The environment's DIT_SHARE_ROWS_CHUNKS (a measurement knob: 0 one task at a time, 1 chunks,
// in place of kOwnChunks), parsed by parse_share_rows_chunks; -1 where unset or empty.
int share_rows_chunks_override();
int parse_share_rows_chunks(const std::string& what, const std::string& value);  // throws naming `what`

// The tasks of one rank's rows for one use of a shared op, in the order they are claimed: each
// batch item's tasks of `block` rows and its shorter last one; in the last item, its last task of
// `block` rows comes last instead, split into the tail (tail()). Computed, not stored.
struct RowTask {
  int64_t item = 0, row0 = 0, rows = 0;  // rows [row0, row0 + rows) of batch item `item`
};
class RowTaskList {
 public:
  RowTaskList(int64_t rows, int64_t batch, int64_t block, int halvings);
  int64_t count() const { return count_; }
  RowTask at(int64_t t) const;  // 0 <= t < count()
  // How many tasks from `t` on to take as one: the largest power of two, at most `most`, of tasks
  // of `block` rows of one batch item (their rows adjoin); 1 where there are not two such.
  int64_t chunk(int64_t t, int64_t most) const;
  // The most whole tasks chunk() can give for these rows (1: none merged): what plans its rows.
  int64_t most_chunk() const;
  // The tail's task sizes for `block`, in the order they are claimed, into `pieces` (room for 8):
  // `halvings` times half of what is left rounded up to 16 rows, then the rest (64: 32, 16, 16;
  // 112: 64, 32, 16); their number, 0 where `block` is not split (16 rows, or 0 halvings).
  static int tail(int64_t block, int halvings, int64_t* pieces);

 private:
  int64_t rows_, batch_, block_, per_item_, count_;
  int64_t pieces_[8] = {};
  int npieces_ = 0;  // 0: no tail (not split, or no task of `block` rows in the last item)
};

// The environment's DIT_SHARE_ROWS_BLOCK (a measurement knob: rows a task, 16 to 4096, in place
// of the rule; docs/benchmarks.md), parsed by parse_share_rows_block; 0 where unset or empty.
int64_t share_rows_block_override();
int64_t parse_share_rows_block(const std::string& what, const std::string& value);  // throws naming `what`

// One row-wise op as this rank has it, the same kind on every rank.
struct RowsShape {
  const char* what = "";  // its name in warnings ("the feed-forward")
  int64_t batch = 1, rows = 0;  // this rank's rows per batch element (0: none)
  size_t in_row = 0;   // bytes of a row of the input
  size_t out_row = 0;  // bytes of a row of the output
  bool adds = false;   // whether the op reads the output rows too (a residual): copied in as well
  size_t item = 0;     // bytes of the vector of a batch element that tasks read (a gate; 0: none)
  bool whole = false;  // whether this rank holds the op's whole weights (and can run them on any rows)
  const char* not_whole = "its weights are split by tensor parallelism";  // why not, for --share-rows on's warning
};

// Where a prepared op's parts lie in the window, and the row counts of every rank's tasks.
struct RowsPlan {
  size_t in_at = 0, out_at = 0, item_at = 0, helped_at = 0;
  int64_t block = 0;  // rows a task
  int tail = 0;       // halvings of the tail (RowTaskList)
  bool chunks = false;  // a rank takes its own tasks in chunks (kOwnChunks)
  std::vector<int64_t> task_rows;  // every count of rows a task (or chunk) can have, ascending
};

// A shared op's arithmetic: one task (or chunk) of `n` rows (n is one of the plan's task_rows), its
// input, output and vector rows in its owner's memory (its own tasks) or window (another's).
class RowTasks {
 public:
  virtual ~RowTasks() = default;
  virtual void task(int64_t n, const char* in, char* out, const char* item) = 0;
};

// The windows of a group and what its ops share. Made once per context.
// `before_own_task` (tests: a slow rank) runs before each task a rank takes from its own window.
class RowSharing {
 public:
  RowSharing(std::shared_ptr<ProcessGroup> group, ShareRows mode, std::function<void()> before_own_task = {});

  // Collective over the group where the mode and the group allow sharing (an all-gather of each
  // rank's shape, the window's size): whether ops of this shape are shared (the same answer on
  // every rank; with --share-rows on, a warning once when not) and if so, their plan.
  bool plan(const RowsShape& shape, RowsPlan* plan);
  // Scratch for the tasks of one op at a time, at least `numel` of `type` (made while preparing).
  Tensor& scratch(DType type, int64_t numel);
  // One use of the window (every rank of the group, in the same order): this rank's input
  // [batch, rows, in_row], output (read too where the op adds), vector [batch, item] (or null);
  // on return its output rows are computed.
  void run(const RowsShape& shape, const RowsPlan& plan, RowTasks& tasks, const void* in, void* out,
           const void* item);
  // Rows of other ranks' tasks this rank has computed.
  uint64_t rows_for_others() const { return rows_for_others_; }

 private:
  struct Rows;  // where a window's owner has its rows
  void run_tasks(const RowsShape& s, const RowsPlan& P, RowTasks& tasks, char* win, const Rows& at,
                 bool helping = false);
  void warn_once(const RowsShape& s, const std::string& why);

  std::shared_ptr<ProcessGroup> g_;
  ShareRows mode_;
  std::function<void()> before_own_task_;
  uint64_t rows_for_others_ = 0;
  std::set<std::string> warned_;
  Tensor scratch_[2];  // f32, bf16
};

}  // namespace dit
