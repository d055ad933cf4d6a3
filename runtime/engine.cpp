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
