#include "runtime/engine.h"

#include <omp.h>

#include "runtime/error.h"

namespace dit {

Engine& Engine::get() {
  static Engine* e = [] {
    try {
      auto* p = new Engine;
      p->engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
      p->stream = dnnl::stream(p->engine);
      return p;
    } catch (const dnnl::error& err) {
      rethrow_dnnl("creating the oneDNN CPU engine", err);
    }
  }();
  return *e;
}

namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41: return "SSE4.1";
    case dnnl::cpu_isa::avx: return "AVX";
    case dnnl::cpu_isa::avx2: return "AVX2";
    case dnnl::cpu_isa::avx2_vnni: return "AVX2-VNNI";
    case dnnl::cpu_isa::avx512_core: return "AVX-512";
    case dnnl::cpu_isa::avx512_core_vnni: return "AVX-512 VNNI";
    case dnnl::cpu_isa::avx512_core_bf16: return "AVX-512 BF16";
    case dnnl::cpu_isa::avx512_core_amx: return "AVX-512 AMX";
    default: return "an instruction set oneDNN does not name";
  }
}

bool probe_bf16_matmul() {
  using dt = dnnl::memory::data_type;
  try {
    const dnnl::memory::desc a({16, 16}, dt::bf16, dnnl::memory::dims{16, 1});
    const dnnl::memory::desc c({16, 16}, dt::f32, dnnl::memory::dims{16, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), Engine::get().engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

bool compute_supported(DType t) {
  if (t == DType::F32) return true;
  static const bool bf16 = probe_bf16_matmul();
  return bf16;
}

bool amx_available() {
  const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & amx) == amx;
}

void require_compute(DType t) {
  DIT_CHECK(compute_supported(t), dtype_name(t) << " compute is not available on this CPU (oneDNN "
                                                << dnnl_version()->major << "." << dnnl_version()->minor
                                                << " computes bf16 only on CPUs with AVX-512; this one has "
                                                << isa_name(dnnl::get_effective_cpu_isa()) << "); use f32");
}

DType parse_compute_type(const std::string& flag, const std::string& value) {
  try {
    const DType t = parse_dtype(value);
    require_compute(t);
    return t;
  } catch (const Error& e) {
    DIT_FAIL(flag << ": " << e.what());
  }
}

void set_num_threads(int n) {
  DIT_CHECK(n > 0, "number of threads must be > 0, got " << n);
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

void rethrow_dnnl(const char* what, const dnnl::error& e) {
  throw Error(std::string(what) + ": oneDNN: " + e.what() + " (status " + std::to_string(int(e.status)) + ")");
}

}  // namespace dit

namespace dit {

void execute(const dnnl::primitive& p, const dnnl::stream& s, const std::unordered_map<int, dnnl::memory>& args) {
  constexpr size_t kMax = 32;
  if (args.size() > kMax) {  // never in this project; the allocating path stays correct
    p.execute(s, args);
    return;
  }
  dnnl_exec_arg_t c[kMax];
  int n = 0;
  for (const auto& [arg, mem] : args) c[n++] = {arg, mem.get(true)};
  dnnl::error::wrap_c_api(dnnl_primitive_execute(p.get(), s.get(), n, c), "could not execute a primitive");
}

}  // namespace dit
