// The compute types this CPU can run, for tests that loop over them: f32
// always, bf16 where oneDNN computes it (CPUs with AVX-512; oneDNN 2.6 has no
// bf16 matmul for AVX2-only ones). Where bf16 is missing, the test says so (a
// Catch2 warning in the report) instead of passing silently; that bf16 is then
// refused with one clear error is tested by runtime:"bf16 compute is refused
// with one clear error where the CPU has none".
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace dit_test {

inline bool bf16_available() {
  if (dit::compute_supported(dit::DType::BF16))
    return true;
  WARN("bf16 compute not checked: oneDNN has no bf16 matmul on this CPU");
  return false;
}

// Whether oneDNN's matmul gives a row the same bits whatever the number of rows it is given:
// its brgemm kernels (CPUs with AVX-512) compute each row alone; gemm:jit (AVX2) blocks the
// sum by the problem's size. Rows shared among ranks (parallel/shared_rows.h) are then the
// local form's bits, else a rounding apart; the tests say which they checked (a Catch2
// warning where it is the rounding).
// Whether oneDNN runs an f32 matmul on its brgemm kernels here (CPUs with AVX-512, as oneDNN
// sees them: ONEDNN_MAX_CPU_ISA=AVX2 makes it an AVX2 CPU), which prefer weights in blocked
// (packed) layouts; elsewhere gemm:jit, with plain layouts.
inline bool onednn_brgemm() {
  static const bool brgemm = [] {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a({64, 48}, dt::f32, dnnl::memory::dims{48, 1});
    const dnnl::memory::desc b({48, 64}, dt::f32, dnnl::memory::dims{1, 48});
    const dnnl::memory::desc c({64, 64}, dt::f32, dnnl::memory::dims{64, 1});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), dit::Engine::get().engine);
    return std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
  }();
  return brgemm;
}

inline bool matmul_rows_independent() {
  const bool brgemm = onednn_brgemm();
  if (!brgemm) WARN("shared rows checked to a rounding, not bit for bit: this CPU's matmul kernel (gemm:jit) sums a row "
                    "by the number of rows");
  return brgemm;
}

inline std::vector<dit::DType> compute_types() {
  std::vector<dit::DType> t{dit::DType::F32};
  if (bf16_available())
    t.push_back(dit::DType::BF16);
  return t;
}

// The same as dtype names ("f32", "bf16"), for command lines.
inline std::vector<std::string> compute_type_names() {
  std::vector<std::string> n;
  for (dit::DType t : compute_types())
    n.push_back(dit::dtype_name(t));
  return n;
}

// "f32" or "f32,bf16": a --dtype list of what this CPU runs.
inline std::string compute_type_list() {
  std::string s;
  for (const std::string &n : compute_type_names())
    s += (s.empty() ? "" : ",") + n;
  return s;
}

} // namespace dit_test
