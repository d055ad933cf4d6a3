#include "runtime/profile.h"

namespace dit::profile {

bool g_enabled = false;
uint64_t g_bytes = 0;
uint64_t g_rows_for_others = 0;

namespace {
Totals g_totals;
thread_local Scope* t_current = nullptr;
}  // namespace

const char* cat_name(Cat c) {
  switch (c) {
    case Cat::Linear: return "linear";
    case Cat::Attention: return "attention";
    case Cat::CrossAttention: return "cross_attention";
    case Cat::NormElementwise: return "norm_elementwise";
    case Cat::Communication: return "communication";
    case Cat::Waiting: return "waiting";
    case Cat::Conditioning: return "conditioning";
    default: return "?";
  }
}

void enable(bool on) { g_enabled = on; }

void reset() {
  g_totals = Totals();
  g_bytes = 0;
  g_rows_for_others = 0;
}

Totals totals() {
  Totals t = g_totals;
  t.bytes_sent = g_bytes;
  t.rows_for_others = g_rows_for_others;
  return t;
}

void add_seconds(Cat c, double s) { g_totals.seconds[int(c)] += s; }

const char* const kAttentionPhaseNames[kAttentionPhases] = {"qk", "softmax", "pv", "rescale", "store", "prepare"};

void add_attention_phases(const double (&s)[kAttentionPhases]) {
  if (!g_enabled) return;
  for (int i = 0; i < kAttentionPhases; ++i) g_totals.attention_phases[i] += s[i];
}

void Scope::start(Cat c) {
  active_ = true;
  parent_ = t_current;
  cat_ = parent_ && parent_->cat_ == Cat::Conditioning ? Cat::Conditioning : c;
  t_current = this;
  t0_ = now_ns();
}

void Scope::stop() {
  const double s = double(now_ns() - t0_) * 1e-9;
  g_totals.seconds[int(cat_)] += s;
  g_totals.calls[int(cat_)] += 1;
  if (parent_) g_totals.seconds[int(parent_->cat_)] -= s;  // exclusive times
  t_current = parent_;
}

}  // namespace dit::profile
