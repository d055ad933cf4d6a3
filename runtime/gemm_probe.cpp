#include "runtime/gemm_probe.h"

#include <chrono>
#include <dnnl.hpp>
#include <random>

#include "runtime/engine.h"

namespace dit {

struct GemmProbe::Impl {
  int64_t M = 0, K = 0, N = 0;
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul mm;
  dnnl::memory a, b, c;
  // The operands' storage: ours rather than oneDNN's (malloc's heap), so that large ones are
  // mapped and given back when the probe ends; a probe between two memory measurements of a
  // benchmark leaves nothing behind.
  Tensor ta, tb, tc;
};

GemmProbe::GemmProbe(int64_t M, int64_t K, int64_t N, DType compute) : impl_(std::make_unique<Impl>()) {
  using dnnl::memory;
  Impl& p = *impl_;
  p.M = M;
  p.K = K;
  p.N = N;
  dnnl_call("GEMM probe", [&] {
    const auto dt = compute == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
    auto& eng = Engine::get().engine;
    auto& st = Engine::get().stream;
    const memory::desc a_md({M, K}, dt, memory::format_tag::ab),
        c_md({M, N}, memory::data_type::f32, memory::format_tag::ab), b_any({K, N}, dt, memory::format_tag::any);
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
    Tensor fa = Tensor::empty({M, K}), fb = Tensor::empty({K, N});
    std::mt19937 g(1);
    std::uniform_real_distribution<float> d(-0.05f, 0.05f);
    for (Tensor* t : {&fa, &fb}) {
      float* x = t->f32();
      for (int64_t i = 0, n = t->numel(); i < n; ++i) x[i] = d(g);
    }
    memory fa_m({{M, K}, memory::data_type::f32, memory::format_tag::ab}, eng, fa.data());
    memory fb_m({{K, N}, memory::data_type::f32, memory::format_tag::ab}, eng, fb.data());
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
      if (i > 0) out.push_back(2.0 * double(p.M) * double(p.K) * double(p.N) / s / 1e9);
    }
  });
  return out;
}

std::string GemmProbe::impl_info() const { return impl_->pd.impl_info_str(); }

}  // namespace dit
