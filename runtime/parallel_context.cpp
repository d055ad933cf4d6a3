#include "runtime/parallel_context.h"

#include <cstring>

namespace dit {

namespace {

// One process computes everything: the whole sequence, both guidance halves in one batch.
class SerialContext final : public ParallelContext, SequenceSplit, CfgSplit, LayerContext {
 public:
  SequenceSplit& sequence() override { return *this; }
  CfgSplit& cfg() override { return *this; }
  LayerContext& layers() override { return *this; }
  bool is_output_rank() const override { return true; }
  void run_output(const std::function<void(RowSplit*)>& fn) override { fn(nullptr); }
  int decode_parts() const override { return 1; }
  void check_agreement(const float*, int64_t) override {}
  std::string describe(const LayoutInfo&) const override { return "serial (1 process)"; }

  // SequenceSplit
  TokenRange range(int64_t tokens) const override { return {0, tokens}; }
  TokenRange output_range(int64_t tokens) const override { return {0, tokens}; }
  void prepare(int64_t batch, int64_t tokens, int64_t row) override { bytes_ = size_t(batch * tokens * row) * 4; }
  void gather(const float* local, float* full) override {
    if (local != full) std::memcpy(full, local, bytes_);
  }
  // CfgSplit
  int branch() const override { return -1; }
  void prepare(int64_t) override {}
  void exchange(const float*, float*) override {}
  // LayerContext
  std::unique_ptr<SelfAttention> self_attention() override { return make_local_self_attention(); }
  std::unique_ptr<CrossAttention> cross_attention() override { return make_local_cross_attention(); }
  std::unique_ptr<TensorParallel> tensor_parallel(TpScope, int64_t) override { return make_serial_tensor_parallel(); }

 private:
  size_t bytes_ = 0;
};

}  // namespace

std::shared_ptr<ParallelContext> make_serial_context() { return std::make_shared<SerialContext>(); }

}  // namespace dit
