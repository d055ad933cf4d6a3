#include "runtime/tensor_parallel.h"

#include "runtime/error.h"

namespace dit {

namespace {

class LocalLinear final : public ParallelLinear {
 public:
  LocalLinear(const LinearSpec& spec, const LinearWeight& w) : lin_(spec, w), out_(spec.out) {}
  void run(const float* x, float* y, const float* gate) override { lin_.run(x, y, gate); }
  void run(const uint16_t* x, float* y, const float* gate) override { lin_.run(x, y, gate); }
  int64_t out_local() const override { return out_; }

 private:
  Linear lin_;
  int64_t out_;
};

class SerialTensorParallel final : public TensorParallel {
 public:
  TokenRange shard(int64_t dim, int64_t) const override { return {0, dim}; }
  void prepare(int64_t, TokenRange tokens, int64_t) override { tokens_ = tokens; }
  TokenRange residual() const override { return tokens_; }
  const float* gather(const float* rows) override { return rows; }
  const uint16_t* gather(const uint16_t* rows) override { return rows; }
  float* gather_buffer(float* own) override { return own; }
  uint16_t* gather_buffer(uint16_t* own) override { return own; }
  std::unique_ptr<ParallelLinear> linear(Split, const LinearSpec& spec, const LinearWeight& w) override {
    return make_local_linear(spec, w);
  }
  void all_reduce(float*, int64_t) override {}
  std::string describe(int64_t, int64_t) const override { return ""; }

 private:
  TokenRange tokens_;
};

}  // namespace

std::unique_ptr<ParallelLinear> make_local_linear(const LinearSpec& spec, const LinearWeight& w) {
  return std::make_unique<LocalLinear>(spec, w);
}

std::unique_ptr<TensorParallel> make_serial_tensor_parallel() { return std::make_unique<SerialTensorParallel>(); }

}  // namespace dit
