#include "parallel/shared_projection.h"

#include <map>

#include "runtime/error.h"

namespace dit {

namespace {

class SharedProjection final : public Projection, RowTasks {
 public:
  SharedProjection(std::shared_ptr<RowSharing> sh, const ProjectionParts& p, const RowsShape& rs,
                   const RowsPlan& plan)
      : sh_(std::move(sh)), s_(p.shape), rs_(rs), plan_(plan) {
    DIT_CHECK(p.whole.size() == 1, "shared projection: " << p.whole.size() << " weights (one is shared)");
    for (const int64_t n : plan.task_rows) {
      LinearSpec spec;
      spec.rows = n;
      spec.in = s_.in;
      spec.out = s_.out;
      spec.input = s_.input;
      spec.output = s_.output;
      ops_.emplace(n, Linear(spec, *p.whole[0]));
    }
  }
  void run(const void* x, void* y) override { sh_->run(rs_, plan_, *this, x, y, nullptr); }

 private:
  // y = x·Wᵀ + b over one task's n rows.
  void task(int64_t n, const char* x, char* y, const char*) override {
    const Linear& op = ops_.at(n);
    if (s_.input == DType::BF16) {
      const uint16_t* xb = reinterpret_cast<const uint16_t*>(x);
      if (s_.output == DType::BF16) op.run(xb, reinterpret_cast<uint16_t*>(y)); else op.run(xb, reinterpret_cast<float*>(y));
    } else {
      const float* xf = reinterpret_cast<const float*>(x);
      if (s_.output == DType::BF16) op.run(xf, reinterpret_cast<uint16_t*>(y)); else op.run(xf, reinterpret_cast<float*>(y));
    }
  }

  std::shared_ptr<RowSharing> sh_;
  ProjectionShape s_;
  RowsShape rs_;
  RowsPlan plan_;
  std::map<int64_t, Linear> ops_;  // by a task's rows
};

}  // namespace

std::unique_ptr<Projection> make_shared_projection(const std::shared_ptr<RowSharing>& sharing,
                                                   ProjectionParts parts) {
  const ProjectionShape& s = parts.shape;
  DIT_CHECK(parts.local, "projection: no local form");
  if (!sharing) return std::move(parts.local);
  int64_t whole_out = 0;
  for (const LinearWeight* w : parts.whole) {
    DIT_CHECK(w && w->in() == s.in, "projection: a whole weight that does not take rows of " << s.in);
    whole_out += w->out();
  }
  RowsShape rs;
  rs.what = "the Q, K, V projection";
  rs.batch = s.batch;
  rs.rows = s.rows;
  rs.in_row = size_t(s.in) * dtype_size(s.input);
  rs.out_row = size_t(s.out) * dtype_size(s.output);
  rs.whole = !parts.whole.empty() && whole_out == s.out;
  // Q, K and V as three matmuls (weights read in place, without the weight cache) write strided
  // output, which oneDNN serves with gemm:jit; that kernel gives a row other bits in a task of 8
  // or 64 rows than among all of a rank's rows (tests/parallel/test_shared_projection.cpp), so
  // that form stays each rank's own. The fused form (one packed weight) takes brgemm, whose rows
  // do not depend on how many there are.
  if (parts.whole.size() > 1) {
    rs.whole = false;
    rs.not_whole = "Q, K and V are three matmuls without the weight cache, whose kernel does not give a row the same "
                   "bits in tasks of other sizes";
  }
  RowsPlan plan;
  if (!sharing->plan(rs, &plan)) return std::move(parts.local);
  return std::make_unique<SharedProjection>(sharing, parts, rs, plan);
}

}  // namespace dit
