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
