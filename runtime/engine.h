// The oneDNN CPU engine and stream shared by every kernel in the process, and the
// boundary where dnnl::error becomes dit::Error.
#pragma once

#include <dnnl.hpp>
#include <string>
#include <unordered_map>

#include "runtime/dtype.h"

namespace dit {

struct Engine {
  dnnl::engine engine;
  dnnl::stream stream;
  static Engine& get();  // created on first use
};

// Whether oneDNN can compute in `t` on this CPU: f32 always; bf16 needs a CPU with AVX-512
// (oneDNN 2.6 has no bf16 matmul for AVX2-only CPUs). Probed once with a small bf16 matmul.
bool compute_supported(DType t);
// Whether oneDNN runs bf16 on AMX tiles here (as oneDNN sees the CPU: ONEDNN_MAX_CPU_ISA applies).
bool amx_available();
// Throws dit::Error "bf16 compute is not available on this CPU (...); use f32" when it is not.
void require_compute(DType t);
// parse_dtype + require_compute for a command-line flag: errors start with the flag's name.
DType parse_compute_type(const std::string& flag, const std::string& value);

// Threads used by oneDNN and the OpenMP loops of the hand-written kernels.
void set_num_threads(int n);
int num_threads();

// p.execute(s, args) without the std::vector that dnnl::primitive::execute builds per call:
// the C arguments are laid out on the stack (at most 32), so the caller allocates nothing.
// (oneDNN 2.x itself still builds a small argument map inside dnnl_primitive_execute.)
void execute(const dnnl::primitive& p, const dnnl::stream& s, const std::unordered_map<int, dnnl::memory>& args);

// Runs f(); a dnnl::error thrown inside becomes dit::Error("<what>: oneDNN: <message> (status N)").
template <class F>
auto dnnl_call(const char* what, F&& f) -> decltype(f());
[[noreturn]] void rethrow_dnnl(const char* what, const dnnl::error& e);

template <class F>
auto dnnl_call(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    rethrow_dnnl(what, e);
  }
}

}  // namespace dit
