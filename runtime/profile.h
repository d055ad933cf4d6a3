// Opt-in time/bytes profiler for the denoising step (dit-bench's breakdown).
//
//   dit::profile::enable(true);                       // process-wide; off by default
//   { dit::profile::Scope s(dit::profile::Cat::Linear); lin.run(x, y); }
//   dit::profile::add_bytes(n);                       // bytes this rank sent to others
//   dit::profile::Totals t = dit::profile::totals();  // exclusive seconds per category
//
// Scopes nest and times are exclusive: a Communication scope inside an Attention scope is
// taken out of Attention, so the categories add up to the instrumented time. A Conditioning
// scope (timestep embedding and modulation) claims everything inside it, linears included. When the
// profiler is off a Scope costs one predictable branch (no clock read). One thread per
// process records (the forward's caller); OpenMP workers inside kernels are not scoped.
#pragma once

#include <time.h>

#include <cstdint>

namespace dit::profile {

enum class Cat : int { Linear = 0, Attention, CrossAttention, NormElementwise, Communication, Waiting, Conditioning, Count };
constexpr int kCats = int(Cat::Count);
// "linear", "attention", "cross_attention", "norm_elementwise", "communication", "waiting", "conditioning"
const char* cat_name(Cat c);

// Where the attention kernels' time went (runtime/attention.h, AttentionPhases), in thread-
// seconds summed over every Attention run while enabled: qk, softmax, pv, rescale, store, prepare.
constexpr int kAttentionPhases = 6;
extern const char* const kAttentionPhaseNames[kAttentionPhases];

struct Totals {
  double seconds[kCats] = {};
  uint64_t calls[kCats] = {};
  uint64_t bytes_sent = 0;
  // Token rows of other ranks' projections and feed-forwards this rank computed (parallel/shared_rows.h).
  uint64_t rows_for_others = 0;
  double attention_phases[kAttentionPhases] = {};
};

extern bool g_enabled;
inline bool enabled() { return g_enabled; }
void enable(bool on);
void reset();
Totals totals();
void add_seconds(Cat c, double s);
void add_attention_phases(const double (&s)[kAttentionPhases]);
inline void add_bytes(uint64_t n) {
  extern uint64_t g_bytes;
  if (g_enabled) g_bytes += n;
}

inline void add_rows_for_others(uint64_t n) {
  extern uint64_t g_rows_for_others;
  if (g_enabled) g_rows_for_others += n;
}
inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

class Scope {
 public:
  explicit Scope(Cat c) {
    if (__builtin_expect(g_enabled, 0)) start(c);
  }
  ~Scope() {
    if (__builtin_expect(active_, 0)) stop();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void start(Cat c);
  void stop();
  Cat cat_ = Cat::Linear;
  bool active_ = false;
  int64_t t0_ = 0;
  Scope* parent_ = nullptr;
};

}  // namespace dit::profile
