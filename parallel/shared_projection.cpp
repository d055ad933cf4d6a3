#include "parallel/shared_projection.h"

#include <map>
#include <vector>

#include "runtime/error.h"

namespace dit {

namespace {

class SharedProjection final : public Projection, RowTasks {
 public:
  SharedProjection(std::shared_ptr<RowSharing> sh, const ProjectionParts& p, const RowsShape& rs,
                   const RowsPlan& plan)
      : sh_(std::move(sh)), s_(p.shape), rs_(rs), plan_(plan) {
    for (const int64_t n : plan.task_rows) {
      std::vector<Linear>& ops = ops_[n];
      for (const LinearWeight* w : p.whole) {
        LinearSpec spec;
        spec.rows = n;
        spec.in = s_.in;
        spec.out = w->out();
        spec.out_stride = p.whole.size() > 1 ? s_.out : 0;  // side by side in a row
        spec.input = s_.input;
        spec.output = s_.output;
        ops.emplace_back(spec, *w);
      }
    }
  }
  void run(const void* x, void* y) override { sh_->run(rs_, plan_, *this, x, y, nullptr); }

 private:
  // y = x·Wᵀ + b over one task's n rows, each weight into its columns.
  void task(int64_t n, const char* x, char* y, const char*) override {
    const size_t esz = dtype_size(s_.output);
    size_t col = 0;
    for (const Linear& op : ops_.at(n)) {
      char* yc = y + col * esz;
      if (s_.input == DType::BF16) {
        const uint16_t* xb = reinterpret_cast<const uint16_t*>(x);
        if (s_.output == DType::BF16) op.run(xb, reinterpret_cast<uint16_t*>(yc)); else op.run(xb, reinterpret_cast<float*>(yc));
      } else {
        const float* xf = reinterpret_cast<const float*>(x);
        if (s_.output == DType::BF16) op.run(xf, reinterpret_cast<uint16_t*>(yc)); else op.run(xf, reinterpret_cast<float*>(yc));
      }
      col += size_t(op.spec().out);
    }
  }

  std::shared_ptr<RowSharing> sh_;
  ProjectionShape s_;
  RowsShape rs_;
  RowsPlan plan_;
  std::map<int64_t, std::vector<Linear>> ops_;  // by a task's rows: one a weight
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
  RowsPlan plan;
  if (!sharing->plan(rs, &plan)) return std::move(parts.local);
  return std::make_unique<SharedProjection>(sharing, parts, rs, plan);
}

}  // namespace dit
