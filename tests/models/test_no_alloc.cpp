// The denoising loop allocates nothing after its first step: no heap allocation (so no
// oneDNN primitive creation, no std::vector growth, no string building) between the end of
// step 1 and the end of the last step.
//
// This test binary interposes the C allocator (malloc, calloc, realloc, posix_memalign,
// aligned_alloc, memalign; operator new goes through malloc) and counts calls while a flag
// is set, on every thread (OpenMP workers included). The counting starts in the progress
// callback of step 1 and stops in the callback of the last step; the callback itself
// allocates nothing.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <dlfcn.h>
#include <dnnl.h>

#include "tests/compute_types.h"
#include "golden_util.h"
#include "models/dit_gen.h"
#include "models/t5/t5_encoder.h"
#include "runtime/engine.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DIT_NO_ALLOC_INTERPOSE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define DIT_NO_ALLOC_INTERPOSE 0
#else
#define DIT_NO_ALLOC_INTERPOSE 1
#endif
#else
#define DIT_NO_ALLOC_INTERPOSE 1
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};         // by our code (must stay 0)
std::atomic<long> g_onednn_allocs{0};  // inside dnnl_primitive_execute (oneDNN's own argument map)
std::atomic<long> g_executes{0}, g_creates{0};
// Threads inside dnnl_primitive_execute: oneDNN's OpenMP workers of a running primitive
// allocate scratch of their own (bf16 matmuls), so any allocation while a primitive runs is
// attributed to oneDNN. Our own kernels call oneDNN from their parallel regions and
// allocate nothing there (that is what the f32 runs check on every thread).
std::atomic<int> g_in_execute{0};
// A counted allocation; `break dit_alloc_counted` in gdb shows who allocates.
extern "C" __attribute__((noinline)) void dit_alloc_counted() { asm volatile(""); }
[[maybe_unused]] inline void note() {
  if (g_counting.load(std::memory_order_relaxed)) {
    if (g_in_execute.load(std::memory_order_relaxed) > 0) {
      g_onednn_allocs.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    g_allocs.fetch_add(1, std::memory_order_relaxed);
    dit_alloc_counted();
  }
}
}  // namespace

#if DIT_NO_ALLOC_INTERPOSE
// oneDNN entry points, interposed to count primitive creations and executions, and to tell
// allocations oneDNN makes inside an execution from ours.
namespace {
using exec_fn = dnnl_status_t (*)(const_dnnl_primitive_t, dnnl_stream_t, int, const dnnl_exec_arg_t*);
using create_fn = dnnl_status_t (*)(dnnl_primitive_t*, const_dnnl_primitive_desc_t);
exec_fn real_execute() {
  static exec_fn f = reinterpret_cast<exec_fn>(dlsym(RTLD_NEXT, "dnnl_primitive_execute"));
  return f;
}
create_fn real_create() {
  static create_fn f = reinterpret_cast<create_fn>(dlsym(RTLD_NEXT, "dnnl_primitive_create"));
  return f;
}
}  // namespace

extern "C" dnnl_status_t dnnl_primitive_execute(const_dnnl_primitive_t p, dnnl_stream_t s, int nargs,
                                                const dnnl_exec_arg_t* args) {
  exec_fn f = real_execute();
  if (g_counting.load(std::memory_order_relaxed)) g_executes.fetch_add(1, std::memory_order_relaxed);
  g_in_execute.fetch_add(1);
  const dnnl_status_t st = f(p, s, nargs, args);
  g_in_execute.fetch_sub(1);
  return st;
}

extern "C" dnnl_status_t dnnl_primitive_create(dnnl_primitive_t* p, const_dnnl_primitive_desc_t pd) {
  if (g_counting.load(std::memory_order_relaxed)) g_creates.fetch_add(1, std::memory_order_relaxed);
  return real_create()(p, pd);
}

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  note();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  note();
  return __libc_realloc(p, n);
}
void* memalign(size_t al, size_t n) {
  note();
  return __libc_memalign(al, n);
}
void* aligned_alloc(size_t al, size_t n) {
  note();
  return __libc_memalign(al, n);
}
int posix_memalign(void** out, size_t al, size_t n) {
  note();
  if (al % sizeof(void*) != 0 || (al & (al - 1)) != 0) return 22;  // EINVAL
  void* p = __libc_memalign(al, n);
  if (!p && n) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}
#endif

namespace {

struct LoopCounts {
  long allocs = 0, onednn_allocs = 0, executes = 0, creates = 0;
};

// What happens during steps 2..steps of one generation (everything after the first step).
[[maybe_unused]] LoopCounts count_loop(dit::Pipeline& pipe, dit::Request req) {
  req.decode = false;
  pipe.generate(req, [&](const dit::StepInfo& si) {
    if (si.step == 1) {
      g_allocs.store(0);
      g_onednn_allocs.store(0);
      g_executes.store(0);
      g_creates.store(0);
      g_counting.store(true);
    }
    if (si.step == si.total) g_counting.store(false);
  });
  g_counting = false;
  return {g_allocs.load(), g_onednn_allocs.load(), g_executes.load(), g_creates.load()};
}

}  // namespace

TEST_CASE("the denoising loop allocates nothing after the first step", "[models][alloc]") {
#if !DIT_NO_ALLOC_INTERPOSE
  WARN("allocator interposition is off under sanitizers: nothing checked");
#else
  // The interposition works: a plain allocation is counted.
  g_allocs = 0;
  g_counting = true;
  void* volatile p = std::malloc(64);
  g_counting = false;
  std::free(p);
  REQUIRE(g_allocs.load() == 1);

  const std::string model = GENERATE(std::string("dit-tiny"), std::string("dit-small"));
  const std::string dtype = GENERATE(Catch::Generators::from_range(dit_test::compute_type_names()));
  const std::string sampler = GENERATE(std::string("ddim"), std::string("dpm++2m"), std::string("euler"));
  const int threads = GENERATE(1, 0);  // one thread (a pinned rank of dit-bench), and the default
  const int saved_threads = dit::num_threads();
  if (threads > 0) dit::set_num_threads(threads);
  struct Restore {
    int n;
    ~Restore() { dit::set_num_threads(n); }
  } restore{saved_threads};
  dit::PipelineOptions po;
  po.model_dir = dit_test::data_path(model);
  po.dtype = dit::parse_dtype(dtype);
  auto pipe = dit::Pipeline::load(po);
  dit::Request req;
  req.prompt = "1";
  // 40 steps: DiT's conditioning is computed in windows of steps (models/dit/dit_conditioning.h):
  // 3 windows of 14 steps at batch 2, 2 of 20 at batch 1, so windows after the first are counted.
  req.steps = 40;
  req.sampler = sampler;
  for (double g : {4.0, 1.0}) {  // CFG (batch 2) and one branch
    req.guidance_scale = g;
    const LoopCounts c = count_loop(*pipe, req);
    INFO(model << " " << dtype << " " << sampler << " threads " << dit::num_threads() << " guidance " << g << ": " << c.allocs << " allocations, "
               << c.creates << " primitive creations, " << c.executes << " primitive executions (oneDNN allocated "
               << c.onednn_allocs << " times inside them)");
    CHECK(c.executes > 0);  // the interposition of oneDNN works
    CHECK(c.allocs == 0);
    CHECK(c.creates == 0);
  }
#endif
}

TEST_CASE("Q, K, V as three matmuls over the mapped weights equal the fused projection", "[models][qkv]") {
  const std::string dtype = GENERATE(Catch::Generators::from_range(dit_test::compute_type_names()));
  dit::Tensor lat[2];
  for (int fused = 0; fused < 2; ++fused) {
    dit::PipelineOptions po;
    po.model_dir = dit_test::data_path("dit-small");
    po.dtype = dit::parse_dtype(dtype);
    po.qkv = fused == 1 ? dit::QkvProjection::Fused : dit::QkvProjection::Split;
    auto pipe = dit::Pipeline::load(po);
    dit::Request req;
    req.prompt = "3";
    req.steps = 4;
    req.decode = false;
    lat[fused] = pipe->generate(req).latents;
  }
  const dit_test::Diff d = dit_test::diff(lat[0], lat[1]);
  INFO(dtype << ": latents rel " << d.rel());
  CHECK(d.rel() <= 1e-5);
}

TEST_CASE("the T5 encoder's encode() allocates nothing after prepare()", "[models][alloc][t5]") {
#if !DIT_NO_ALLOC_INTERPOSE
  WARN("allocator interposition is off under sanitizers: nothing checked");
#else
  const std::string model = GENERATE(std::string("pixart-tiny"), std::string("pixart-alpha-tiny"));
  const std::string dtype = GENERATE(Catch::Generators::from_range(dit_test::compute_type_names()));
  const int threads = GENERATE(1, 0);
  const int saved_threads = dit::num_threads();
  if (threads > 0) dit::set_num_threads(threads);
  struct Restore {
    int n;
    ~Restore() { dit::set_num_threads(n); }
  } restore{saved_threads};
  auto w = std::make_shared<const dit::T5Weights>(
      dit::T5Weights::load(dit_test::data_path(model + "/text_encoder"), dit::parse_dtype(dtype)));
  dit::T5Encoder enc(w);
  enc.prepare(2, 40);
  std::vector<int64_t> ids(80, 0), mask(80, 0);
  for (int j = 0; j < 12; ++j) ids[size_t(j)] = 3 + j, mask[size_t(j)] = 1;
  ids[12] = mask[12] = 1;
  ids[40] = mask[40] = 1;
  std::vector<float> out(size_t(80 * w->cfg.d_model));
  enc.encode(ids.data(), mask.data(), out.data());  // first call
  g_allocs = 0;
  g_onednn_allocs = 0;
  g_executes = 0;
  g_creates = 0;
  g_counting = true;
  enc.encode(ids.data(), mask.data(), out.data());
  g_counting = false;
  INFO(model << " " << dtype << " threads " << dit::num_threads() << ": " << g_allocs.load() << " allocations, "
             << g_creates.load() << " primitive creations, " << g_executes.load() << " executions (oneDNN allocated "
             << g_onednn_allocs.load() << " times inside them)");
  CHECK(g_executes.load() > 0);
  CHECK(g_allocs.load() == 0);
  CHECK(g_creates.load() == 0);
#endif
}
