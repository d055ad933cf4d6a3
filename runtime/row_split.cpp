#include "runtime/row_split.h"

#include <cstring>

namespace dit {

namespace {

class SerialRowSplit final : public RowSplit {
 public:
  int parts() const override { return 1; }
  int index() const override { return 0; }
  void exchange_halo(void* band, int64_t rows, size_t row_bytes) override {
    char* b = static_cast<char*>(band);
    std::memset(b, 0, row_bytes);
    std::memset(b + size_t(rows + 1) * row_bytes, 0, row_bytes);
  }
  void sum(double*, int64_t) override {}
  void gather(const float* mine, float* all, const std::vector<size_t>& counts) override {
    if (mine != all) std::memcpy(all, mine, counts.at(0) * sizeof(float));
  }
};

}  // namespace

std::unique_ptr<RowSplit> make_serial_row_split() { return std::make_unique<SerialRowSplit>(); }

}  // namespace dit
