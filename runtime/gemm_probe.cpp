#include "runtime/gemm_probe.h"

#include <chrono>
#include <dnnl.hpp>
#include <random>

#include "runtime/engine.h"
#include "runtime/error.h"

namespace dit {

struct GemmProbe::Impl {
  int64_t M = 0, K = 0, N = 0, batch = 1;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul mm;
  dnnl::memory a, b, c;
  // The operands' storage: ours rather than oneDNN's (malloc's heap), so that large ones are
  // mapped and given back when the probe ends; a probe between two memory measurements of a
  // benchmark leaves nothing behind.
  Tensor ta, tb, tc;
};

GemmProbe::GemmProbe(int64_t M, int64_t K, int64_t N, DType compute, int64_t batch)
    : impl_(std::make_unique<Impl>()) {
  using dnnl::memory;
  Impl& p = *impl_;
  p.M = M;
  p.K = K;
  p.N = N;
  DIT_CHECK(M >= 1 && K >= 1 && N >= 1 && batch >= 1, "GEMM probe: empty shape");
  p.batch = batch;
  dnnl_call("GEMM probe", [&] {
    const auto dt = compute == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
    auto& eng = Engine::get().engine;
    auto& st = Engine::get().stream;
    // [M, K] x [K, N], or with a batch [batch, M, K] x [batch, K, N].
    const bool b3 = batch > 1;
    auto dims = [&](int64_t r, int64_t c) { return b3 ? memory::dims{batch, r, c} : memory::dims{r, c}; };
    const auto plain = b3 ? memory::format_tag::abc : memory::format_tag::ab;
    const memory::desc a_md(dims(M, K), dt, plain), c_md(dims(M, N), memory::data_type::f32, plain),
        b_any(dims(K, N), dt, memory::format_tag::any);
    p.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_any, c_md), eng);
    p.mm = dnnl::matmul(p.pd);
    auto storage = [](const memory::desc& md) { return Tensor::empty({int64_t((md.get_size() + 3) / 4)}); };
    p.ta = storage(a_md);
    p.tb = storage(p.pd.weights_desc());
    p.tc = storage(c_md);
    p.a = memory(a_md, eng, p.ta.data());
    p.b = memory(p.pd.weights_desc(), eng, p.tb.data());
    p.c = memory(c_md, eng, p.tc.data());
    // Small random inputs, written as f32 and reordered into the compute type and layout.
    Tensor fa = Tensor::empty({batch * M, K}), fb = Tensor::empty({batch * K, N});
    std::mt19937 g(1);
    std::uniform_real_distribution<float> d(-0.05f, 0.05f);
    for (Tensor* t : {&fa, &fb}) {
      float* x = t->f32();
      for (int64_t i = 0, n = t->numel(); i < n; ++i) x[i] = d(g);
    }
    memory fa_m({dims(M, K), memory::data_type::f32, plain}, eng, fa.data());
    memory fb_m({dims(K, N), memory::data_type::f32, plain}, eng, fb.data());
    dnnl::reorder(fa_m, p.a).execute(st, fa_m, p.a);
    dnnl::reorder(fb_m, p.b).execute(st, fb_m, p.b);
    st.wait();
  });
}

GemmProbe::~GemmProbe() = default;
GemmProbe::GemmProbe(GemmProbe&&) noexcept = default;

std::vector<double> GemmProbe::run(int runs) {
  Impl& p = *impl_;
  auto& st = Engine::get().stream;
  std::vector<double> out;
  dnnl_call("GEMM probe", [&] {
    for (int i = 0; i < runs + 1; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      execute(p.mm, st, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
      st.wait();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) out.push_back(2.0 * double(p.batch) * double(p.M) * double(p.K) * double(p.N) / s / 1e9);
    }
  });
  return out;
}

std::string GemmProbe::impl_info() const { return impl_->pd.impl_info_str(); }

}  // namespace dit
