#include "models/dit/dit_conditioning.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "models/common/embeddings.h"
#include "models/common/patch_grid.h"
#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

// Rows [W·B, n·D] (row = slot·B + b) -> out[slot] as [n, B, D], `stride` floats per slot.
void scatter_chunks(const float* m, int64_t steps, int64_t batch, int64_t n, int64_t dim, int64_t stride, float* out) {
  for (int64_t s = 0; s < steps; ++s)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t k = 0; k < n; ++k)
        std::memcpy(out + s * stride + (k * batch + b) * dim, m + ((s * batch + b) * n + k) * dim, size_t(dim) * 4);
}

// Steps per window: at most max_rows / batch, balanced over the schedule (20 steps in windows
// of 16 at most: two windows of 10, not 16 + 4 with 12 slots computed for nothing).
int64_t steps_per_window(int64_t steps, int64_t batch, int64_t max_rows) {
  const int64_t most = std::max<int64_t>(1, max_rows / batch);
  if (steps <= 1) return 1;
  const int64_t windows = (steps + most - 1) / most;
  return (steps + windows - 1) / windows;
}

}  // namespace

void DiTConditioning::prepare(const DiTWeights& w, int64_t batch, TensorParallel& tp) {
  w_ = &w;
  tp_ = &tp;
  B_ = batch;
  D_ = w.cfg.hidden();
  W_ = 0;  // the window's primitives and buffers are made by begin(), which knows the schedule
  ops_.clear();
}

void DiTConditioning::create(int64_t steps) {
  if (steps == W_) return;
  W_ = steps;
  const int64_t R = W_ * B_, D = D_, L = int64_t(w_->blocks.size());
  ops_.clear();
  for (size_t l = 0; l < w_->blocks.size(); ++l) {
    const DiTBlockWeights& bw = w_->blocks[l];
    BlockOps o;
    if (l == 0 || !same_embedder(l)) {
      o.t_fc1 = make_linear(bw.t_fc1, R, Act::Silu);
      o.t_fc2 = make_linear(bw.t_fc2, R);
    }
    LinearSpec spec;  // one "sequence" of R rows (per-row modulation, no gate)
    spec.rows = R;
    spec.in = D;
    spec.out = 6 * D;
    o.ada = tp_->linear(bw.ada.split, spec, bw.ada.w);
    ops_.push_back(std::move(o));
  }
  final_ada_ = make_linear(w_->final_ada, R);
  tfreq_ = Tensor::empty({R, 256});
  temb_ = Tensor::empty({R, D});
  c0_ = Tensor::empty({R, D});
  c_ = Tensor::empty({R, D});
  mod_ = Tensor::empty({R, 6 * D});
  chunks_ = Tensor::empty({W_, L, 6, B_, D});
  final_ = Tensor::empty({W_, 2, B_, D});
  times_.assign(size_t(R), std::numeric_limits<double>::quiet_NaN());
}

void DiTConditioning::begin(const std::vector<int64_t>& class_ids, const std::vector<double>& schedule) {
  DIT_CHECK(w_ && int64_t(class_ids.size()) == B_, "DiT conditioning: " << class_ids.size() << " class ids for a batch of " << B_);
  y_ = class_ids;
  schedule_ = schedule;
  create(steps_per_window(int64_t(schedule.size()), B_, kMaxRows));
  std::fill(times_.begin(), times_.end(), std::numeric_limits<double>::quiet_NaN());  // new classes: nothing current
}

bool DiTConditioning::same_embedder(size_t l) const {
  const DiTBlockWeights &a = w_->blocks[l], &b = w_->blocks[0];
  return a.t_fc1.weight.data() == b.t_fc1.weight.data() && a.t_fc1.bias.data() == b.t_fc1.bias.data() &&
         a.t_fc2.weight.data() == b.t_fc2.weight.data() && a.t_fc2.bias.data() == b.t_fc2.bias.data() &&
         a.class_table.data() == b.class_table.data();
}

void DiTConditioning::select(const double* t) {
  DIT_CHECK(W_ > 0, "DiT conditioning: select() before begin()");
  const int64_t B = B_;
  auto holds = [&](int64_t slot) {
    for (int64_t b = 0; b < B; ++b)
      if (!(times_[size_t(slot * B + b)] == t[b])) return false;
    return true;
  };
  for (int64_t s = 0; s < W_; ++s)
    if (holds(s)) {
      slot_ = s;
      return;
    }
  // Not in the window: the next W steps of the schedule from t's place (when every row is
  // at the same timestep, as in the pipeline), the last one repeated past the schedule's end;
  // else t in every slot.
  const bool one_time = std::all_of(t, t + B, [&](double v) { return v == t[0]; });
  int64_t at = -1;
  for (size_t i = 0; one_time && at < 0 && i < schedule_.size(); ++i)
    if (schedule_[i] == t[0]) at = int64_t(i);
  for (int64_t s = 0; s < W_; ++s)
    for (int64_t b = 0; b < B; ++b)
      times_[size_t(s * B + b)] =
          at < 0 ? t[b] : schedule_[size_t(std::min<int64_t>(at + s, int64_t(schedule_.size()) - 1))];
  compute();
  slot_ = 0;
}

// For every slot and row of the window (times_): c_0 and the final layer's modulation, then
// each block's c_l (c_0 when its embedder is block 0's) and modulation.
void DiTConditioning::compute() {
  profile::Scope prof(profile::Cat::Conditioning);
  const int64_t B = B_, R = W_ * B_, D = D_, L = int64_t(w_->blocks.size());
  for (int64_t r = 0; r < R; ++r) timestep_embedding(times_[size_t(r)], 256, 1.0f, tfreq_.f32() + r * 256);
  // c = SiLU(TimestepEmbedding_l(t) + class_table_l[y])   [R, D]
  auto embed = [&](size_t l, float* c) {
    ops_[l].t_fc1.run(tfreq_.f32(), temb_.f32());  // linear_1 + SiLU
    ops_[l].t_fc2.run(temb_.f32(), c);             // linear_2
    const float* table = w_->blocks[l].class_table.f32();
    for (int64_t r = 0; r < R; ++r) add(c + r * D, table + y_[size_t(r % B)] * D, c + r * D, D);
    silu(c, c, R * D);
  };
  embed(0, c0_.f32());
  final_ada_.run(c0_.f32(), mod_.f32());  // [R, 2D]: shift, scale
  scatter_chunks(mod_.f32(), W_, B, 2, D, 2 * B * D, final_.f32());
  for (size_t l = 0; l < size_t(L); ++l) {
    const float* c = c0_.f32();
    if (l > 0 && !same_embedder(l)) {
      embed(l, c_.f32());
      c = c_.f32();
    }
    ops_[l].ada->run(c, mod_.f32());  // [R, 6D]
    scatter_chunks(mod_.f32(), W_, B, 6, D, L * 6 * B * D, chunks_.f32() + int64_t(l) * 6 * B * D);
  }
  ++computed_;
}

const float* DiTConditioning::block_chunk(size_t l, int k) const {
  const int64_t L = int64_t(w_->blocks.size());
  return chunks_.f32() + ((slot_ * L + int64_t(l)) * 6 + k) * B_ * D_;
}

const float* DiTConditioning::final_chunk(int k) const { return final_.f32() + (slot_ * 2 + k) * B_ * D_; }

}  // namespace dit
