#include "parallel/shared_feed_forward.h"

#include <map>

#include "runtime/error.h"

namespace dit {

namespace {

class SharedFeedForward final : public FeedForward, RowTasks {
 public:
  SharedFeedForward(std::shared_ptr<RowSharing> sh, const FeedForwardParts& p, const RowsShape& rs,
                    const RowsPlan& plan)
      : sh_(std::move(sh)), s_(p.shape), rs_(rs), plan_(plan),
        hidden_(sh_->scratch(s_.hidden, plan.task_rows.back() * s_.hidden_dim)) {
    DIT_CHECK(s_.hidden == DType::BF16 || s_.input == DType::F32,
              "shared feed-forward: bf16 rows for an f32 hidden layer");
    for (const int64_t n : plan.task_rows) {
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
  void run(const float* h, float* x, const float* gate) override { sh_->run(rs_, plan_, *this, h, x, gate); }
  void run(const uint16_t* h, float* x, const float* gate) override {
    sh_->run(rs_, plan_, *this, h, x, gate);
  }

 private:
  struct Ops {
    Linear fc1, fc2;
  };

  // x += gate ⊙ (GELU-tanh(h·W1ᵀ + b1)·W2ᵀ + b2) over one task's (or chunk's) n rows.
  void task(int64_t n, const char* h, char* xb, const char* gate_b) override {
    const Ops& o = ops_.at(n);
    float* x = reinterpret_cast<float*>(xb);
    const float* gate = reinterpret_cast<const float*>(gate_b);
    if (s_.hidden == DType::BF16) {
      if (s_.input == DType::BF16)
        o.fc1.run(reinterpret_cast<const uint16_t*>(h), hidden_.bf16());
      else
        o.fc1.run(reinterpret_cast<const float*>(h), hidden_.bf16());
      o.fc2.run(hidden_.bf16(), x, gate);
    } else {
      o.fc1.run(reinterpret_cast<const float*>(h), hidden_.f32());
      o.fc2.run(hidden_.f32(), x, gate);
    }
  }

  std::shared_ptr<RowSharing> sh_;
  FeedForwardShape s_;
  RowsShape rs_;
  RowsPlan plan_;
  Tensor hidden_;  // one task's (or chunk's) hidden rows (shared by the feed-forwards: one runs at a time)
  std::map<int64_t, Ops> ops_;  // by a task's rows
};

}  // namespace

std::unique_ptr<FeedForward> make_shared_feed_forward(const std::shared_ptr<RowSharing>& sharing,
                                                      FeedForwardParts parts) {
  if (!sharing) return make_local_feed_forward(std::move(parts));
  const FeedForwardShape& s = parts.shape;
  RowsShape rs;
  rs.what = "the feed-forward";
  rs.batch = s.batch;
  rs.rows = s.rows;
  rs.in_row = size_t(s.dim) * dtype_size(s.input);
  rs.out_row = size_t(s.dim) * 4;  // x, f32
  rs.adds = true;                  // the gated residual
  rs.item = size_t(s.dim) * 4;     // the gate
  rs.whole = parts.w1 && parts.w2;
  RowsPlan plan;
  if (!sharing->plan(rs, &plan)) return make_local_feed_forward(std::move(parts));
  return std::make_unique<SharedFeedForward>(sharing, parts, rs, plan);
}

}  // namespace dit
