// The machine's GEMM speed as oneDNN reaches it: an M×K×N matmul with weights prepacked
// into oneDNN's preferred layout (the best case), timed on the calling thread's current
// oneDNN threads. Benchmarks divide what they achieve by this (their "utilisation").
//
//   GemmProbe g(1024, 1152, 4608, DType::F32);   // primitive created, inputs packed
//   std::vector<double> gflops = g.run(5);        // one GFLOP/s figure per timed run
//   GemmProbe w(1024, 128, 128, DType::BF16, 16); // 16 of them as one batched matmul (the bf16
//                                                 // Winograd plan's, runtime/conv2d_winograd_bf16.h)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace dit {

class GemmProbe {
 public:
  // batch > 1: [batch, M, K] x [batch, K, N], each with its own weights. dit::Error on oneDNN failure.
  GemmProbe(int64_t M, int64_t K, int64_t N, DType compute, int64_t batch = 1);
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
