#include "parallel/row_split.h"

#include <cstring>

#include "parallel/process_group.h"

namespace dit {

namespace {

class GroupRowSplit final : public RowSplit {
 public:
  explicit GroupRowSplit(std::shared_ptr<ProcessGroup> g) : g_(std::move(g)) {}
  int parts() const override { return g_->size(); }
  int index() const override { return g_->rank(); }

  void exchange_halo(void* band, int64_t rows, size_t row_bytes) override {
    char* b = static_cast<char*>(band);
    char *top = b, *first = b + row_bytes, *last = b + size_t(rows) * row_bytes, *bottom = last + row_bytes;
    const int me = g_->rank(), n = g_->size();
    // Tags: `down` for rows sent to the next rank, `up` for rows sent to the previous one.
    const uint32_t down = tag_, up = tag_ + 1;
    tag_ += 2;
    P2PHandle h[4];
    if (me > 0) h[0] = g_->irecv(top, row_bytes, me - 1, down);
    if (me + 1 < n) h[1] = g_->irecv(bottom, row_bytes, me + 1, up);
    if (me > 0) h[2] = g_->isend(first, row_bytes, me - 1, up);
    if (me + 1 < n) {
      if (first == last) h[2].wait();  // a one-row band: the same buffer cannot be posted twice
      h[3] = g_->isend(last, row_bytes, me + 1, down);
    }
    if (me == 0) std::memset(top, 0, row_bytes);
    if (me + 1 == n) std::memset(bottom, 0, row_bytes);
    for (P2PHandle& x : h) x.wait();
  }

  void sum(double* x, int64_t n) override {
    if (g_->size() == 1 || n == 0) return;
    all_.resize(size_t(n) * size_t(g_->size()));
    g_->all_gather_bytes(x, all_.data(), size_t(n) * sizeof(double));
    for (int64_t i = 0; i < n; ++i) {
      double t = 0;
      for (int p = 0; p < g_->size(); ++p) t += all_[size_t(p) * size_t(n) + size_t(i)];
      x[i] = t;
    }
  }

  void gather(const float* mine, float* all, const std::vector<size_t>& counts) override {
    g_->all_gather_v(mine, all, counts);
  }

 private:
  std::shared_ptr<ProcessGroup> g_;
  uint32_t tag_ = 0x40000000u;  // away from the ring's tags (they start at 1 on their own groups)
  std::vector<double> all_;
};

}  // namespace

std::unique_ptr<RowSplit> make_row_split(std::shared_ptr<ProcessGroup> group) {
  return std::make_unique<GroupRowSplit>(std::move(group));
}

}  // namespace dit
