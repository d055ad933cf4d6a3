// The machine's GEMM speed as oneDNN reaches it: an M×K×N matmul with weights prepacked
// into oneDNN's preferred layout (the best case), timed on the calling thread's current
// oneDNN threads. Benchmarks divide what they achieve by this (their "utilisation").
//
//   GemmProbe g(1024, 1152, 4608, DType::F32);   // primitive created, inputs packed
//   std::vector<double> gflops = g.run(5);        // one GFLOP/s figure per timed run
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace dit {

class GemmProbe {
 public:
  GemmProbe(int64_t M, int64_t K, int64_t N, DType compute);  // dit::Error on oneDNN failure
  ~GemmProbe();
  GemmProbe(GemmProbe&&) noexcept;
  // One untimed run, then `runs` timed ones: GFLOP/s of each.
  std::vector<double> run(int runs);
  std::string impl_info() const;  // oneDNN's implementation name

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dit
