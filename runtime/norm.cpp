#include "runtime/norm.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <unordered_map>

#include "runtime/dtype.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"
#include "runtime/simd_math.h"

namespace dit {

using dnnl::memory;
using dt = dnnl::memory::data_type;

namespace {

// One row: y = (x - mean)·rstd·mul + add rounded to bf16 (to nearest even, as f32_to_bf16),
// mean and variance summed in f32 over two passes; mul = 1 + scale and add = shift, or both
// null (plain). The row is read from memory once: the second and third passes find it in L1.
DIT_MULTIVERSION void layer_norm_row_bf16(const float* x, int64_t D, float eps, const float* mul, const float* add,
                                          uint16_t* y) {
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < D; ++i) sum += x[i];
  const float mean = sum / float(D);
  float sq = 0.f;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < D; ++i) {
    const float d = x[i] - mean;
    sq += d * d;
  }
  const float rstd = 1.f / std::sqrt(sq / float(D) + eps);
  if (mul) {
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) y[i] = f32_to_bf16_rne((x[i] - mean) * rstd * mul[i] + add[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) y[i] = f32_to_bf16_rne((x[i] - mean) * rstd);
  }
}

}  // namespace

struct LayerNormModulate::Impl {
  int64_t batch = 0, rows = 0, dim = 0;
  float eps = 0.f;
  std::string what;
  dnnl::layer_normalization_forward mod, plain;
  memory src, dst, scale, shift, mod_scratch, plain_scratch;
  std::unordered_map<int, memory> mod_args, plain_args;
  Tensor one_plus_scale;  // [batch, dim]
  Tensor scratch_mod, scratch_plain;
};

LayerNormModulate::LayerNormModulate() = default;
LayerNormModulate::LayerNormModulate(LayerNormModulate&&) noexcept = default;
LayerNormModulate& LayerNormModulate::operator=(LayerNormModulate&&) noexcept = default;
LayerNormModulate::~LayerNormModulate() = default;

LayerNormModulate::LayerNormModulate(int64_t batch, int64_t rows, int64_t dim, float eps)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.batch = batch;
  m.rows = rows;
  m.dim = dim;
  m.eps = eps;
  std::ostringstream os;
  os << "LayerNormModulate [" << batch << ", " << rows << ", " << dim << "] eps=" << eps;
  m.what = os.str();
  DIT_CHECK(batch > 0 && rows > 0 && dim > 0, m.what << ": bad sizes");
  m.one_plus_scale = Tensor::empty({batch, dim});
  dnnl_call(m.what.c_str(), [&] {
    auto& eng = Engine::get().engine;
    memory::desc data_md({rows, dim}, dt::f32, memory::dims{dim, 1});
    memory::desc vec_md({dim}, dt::f32, memory::dims{1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto make = [&](dnnl::normalization_flags flags, dnnl::layer_normalization_forward& prim, Tensor& sbuf,
                    memory& smem, std::unordered_map<int, memory>& args) {
      dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, data_md, eps, flags);
      dnnl::layer_normalization_forward::primitive_desc pd(d, attr, eng);
      prim = dnnl::layer_normalization_forward(pd);
      size_t sp = pd.scratchpad_desc().get_size();
      if (sp) {
        sbuf = Tensor::empty({int64_t((sp + 3) / 4)});
        smem = memory(pd.scratchpad_desc(), eng, sbuf.data());
        args[DNNL_ARG_SCRATCHPAD] = smem;
      }
    };
    m.src = memory(data_md, eng, nullptr);
    m.dst = memory(data_md, eng, nullptr);
    m.scale = memory(vec_md, eng, nullptr);
    m.shift = memory(vec_md, eng, nullptr);
    m.mod_args = {{DNNL_ARG_SRC, m.src}, {DNNL_ARG_DST, m.dst}, {DNNL_ARG_SCALE, m.scale}, {DNNL_ARG_SHIFT, m.shift}};
    m.plain_args = {{DNNL_ARG_SRC, m.src}, {DNNL_ARG_DST, m.dst}};
    make(dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift, m.mod, m.scratch_mod,
         m.mod_scratch, m.mod_args);
    make(dnnl::normalization_flags::none, m.plain, m.scratch_plain, m.plain_scratch, m.plain_args);
  });
}

void LayerNormModulate::run(const float* x, float* y, const float* shift, const float* scale) const {
  DIT_CHECK(impl_, "LayerNormModulate::run on an empty object");
  profile::Scope prof(profile::Cat::NormElementwise);
  Impl& m = *impl_;
  DIT_CHECK((shift == nullptr) == (scale == nullptr), m.what << ": shift and scale must both be given or both null");
  const int64_t D = m.dim, per = m.rows * m.dim;
  dnnl_call(m.what.c_str(), [&] {
    auto& s = Engine::get().stream;
    if (!scale) {
      // One execution over all rows of all batch elements would also do; keep the [rows, dim] primitive.
      for (int64_t b = 0; b < m.batch; ++b) {
        m.src.set_data_handle(const_cast<float*>(x + b * per));
        m.dst.set_data_handle(y + b * per);
        execute(m.plain, s, m.plain_args);
      }
    } else {
      float* ops = m.one_plus_scale.f32();
      for (int64_t i = 0; i < m.batch * D; ++i) ops[i] = 1.f + scale[i];
      for (int64_t b = 0; b < m.batch; ++b) {
        m.src.set_data_handle(const_cast<float*>(x + b * per));
        m.dst.set_data_handle(y + b * per);
        m.scale.set_data_handle(ops + b * D);
        m.shift.set_data_handle(const_cast<float*>(shift + b * D));
        execute(m.mod, s, m.mod_args);
      }
    }
    s.wait();
  });
}

void LayerNormModulate::run(const float* x, uint16_t* y, const float* shift, const float* scale) const {
  DIT_CHECK(impl_, "LayerNormModulate::run on an empty object");
  profile::Scope prof(profile::Cat::NormElementwise);
  Impl& m = *impl_;
  DIT_CHECK((shift == nullptr) == (scale == nullptr), m.what << ": shift and scale must both be given or both null");
  DIT_CHECK(static_cast<const void*>(x) != static_cast<const void*>(y),
            m.what << ": bf16 output cannot overwrite its f32 input");
  const int64_t B = m.batch, R = m.rows, D = m.dim;
  float* ops = m.one_plus_scale.f32();
  if (scale)
    for (int64_t i = 0; i < B * D; ++i) ops[i] = 1.f + scale[i];
  constexpr int64_t kRows = 16;  // rows per task
  const int64_t tasks = (B * R + kRows - 1) / kRows;
  parallel_for(tasks, B * R * D > 16384, [&](int64_t t) {
    for (int64_t r = t * kRows, end = std::min(B * R, r + kRows); r < end; ++r) {
      const int64_t b = r / R;
      layer_norm_row_bf16(x + r * D, D, m.eps, scale ? ops + b * D : nullptr, scale ? shift + b * D : nullptr,
                          y + r * D);
    }
  });
}

}  // namespace dit
