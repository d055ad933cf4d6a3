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
