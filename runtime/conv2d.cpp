#include "runtime/conv2d.h"

#include <sstream>
#include <unordered_map>

#include "runtime/conv2d_winograd.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/packed_weights.h"
#include "runtime/prefault.h"

namespace dit {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct Conv2d::Impl {
  Conv2dSpec spec;
  std::string what, impl_name;
  dnnl::convolution_forward prim;
  Tensor weight, bias;  // weight in the primitive's layout (private, or its packed entry mapped), bias f32
  bool weight_shared = false;
  memory user_src, user_dst, src, dst, scratch;
  bool reorder_src = false, reorder_dst = false;
  std::shared_ptr<Conv2dWorkspace> ws;
  dnnl::reorder src_in, dst_in, dst_out;
  std::unordered_map<int, memory> args, src_in_args, dst_in_args, dst_out_args;
  std::unique_ptr<WinogradConv> wino;  // the Winograd form, when spec.winograd found one
};

namespace {
Tensor grown(const Tensor& t, size_t bytes) {
  const int64_t n = int64_t((bytes + 3) / 4);
  return bytes == 0 || (t.defined() && t.numel() >= n) ? t : Tensor::empty({n});
}
}  // namespace

void Conv2dWorkspace::reserve(size_t src_bytes, size_t dst_bytes, size_t scratch_bytes) {
  src_ = grown(src_, src_bytes);
  dst_ = grown(dst_, dst_bytes);
  scratch_ = grown(scratch_, scratch_bytes);
}

size_t Conv2dWorkspace::bytes() const {
  size_t n = 0;
  for (const Tensor* t : {&src_, &dst_, &scratch_})
    if (t->defined()) n += size_t(t->numel()) * 4;
  return n;
}

void Conv2dWorkspace::prefault() {
  for (Tensor* t : {&src_, &dst_, &scratch_})
    if (t->defined()) dit::prefault(t->data(), t->nbytes());
}

Conv2d::Conv2d() = default;
Conv2d::Conv2d(Conv2d&&) noexcept = default;
Conv2d& Conv2d::operator=(Conv2d&&) noexcept = default;
Conv2d::~Conv2d() = default;

// The weight in the layout `want`, written by pack(f32 weight, dst): mapped from its packed entry
// (made there from `weight` when missing), or, without one or where an optional directory failed,
// a private copy (none when `private_copy` is false: an undefined Tensor). *shared says which.
template <class Pack>
static Tensor weight_in_layout(const Tensor& weight, const memory::desc& want, const Pack& pack,
                               const PackedSource& packed, bool* shared, bool private_copy = true) {
  auto fill = [&](void* dst) {
    const Tensor wf = weight.dtype() == DType::F32 ? weight : weight.to(DType::F32);
    pack(wf.f32(), dst);
  };
  if (packed) {
    Tensor t = packed.dir->get(packed.key, want, fill, packed.release_plain, packed.source);
    if ((*shared = t.defined())) return t;
  }
  if (!private_copy) return Tensor();
  Tensor t = Tensor::empty({int64_t((want.get_size() + 3) / 4)});
  fill(t.data());
  return t;
}

Conv2d::Conv2d(const Conv2dSpec& spec, const Tensor& weight, const Tensor& bias,
               std::shared_ptr<Conv2dWorkspace> workspace, const PackedSource& packed)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.spec = spec;
  m.ws = workspace ? std::move(workspace) : std::make_shared<Conv2dWorkspace>();
  const auto& s = spec;
  std::ostringstream os;
  os << "Conv2d x[" << s.batch << ", " << s.in_channels << ", " << s.height << ", " << s.width << "] w["
     << s.out_channels << ", " << s.in_channels << ", " << s.kernel << ", " << s.kernel << "] stride " << s.stride
     << " pad " << s.row_padding() << "x" << s.padding << (s.nearest2x_input ? " of nearest2x(x)" : "")
     << (s.accumulate ? " accumulate" : "") << " " << dtype_name(s.compute);
  m.what = os.str();
  DIT_CHECK(s.batch > 0 && s.in_channels > 0 && s.out_channels > 0 && s.kernel > 0 && s.stride > 0 &&
                s.padding >= 0 && s.row_padding() >= 0 && s.out_height() > 0 && s.out_width() > 0,
            m.what << ": bad sizes");
  DIT_CHECK(s.compute == DType::F32 || s.blocked || s.nhwc,
            m.what << ": bf16 compute converts x in the layout reorder (blocked)");
  DIT_CHECK(s.input == DType::F32 || (s.compute == DType::BF16 && s.nhwc),
            m.what << ": a bf16 x needs bf16 compute and the channels-last layout");
  require_compute(s.compute);
  const dt cdt = s.compute == DType::BF16 ? dt::bf16 : dt::f32;
  const dt idt = s.input == DType::BF16 ? dt::bf16 : dt::f32;
  const tag act = s.nhwc ? tag::nhwc : tag::nchw;
  DIT_CHECK(weight.defined() && weight.shape() == Shape({s.out_channels, s.in_channels, s.kernel, s.kernel}),
            m.what << ": weight is " << shape_str(weight.shape()));
  if (bias.defined()) {
    DIT_CHECK(bias.numel() == s.out_channels, m.what << ": bias has " << bias.numel() << " elements");
    m.bias = bias.dtype() == DType::F32 ? bias : bias.to(DType::F32);
  }
  const memory::desc w_user({s.out_channels, s.in_channels, s.kernel, s.kernel}, dt::f32, tag::oihw);
  if (s.winograd && (m.wino = make_winograd(s, m.bias.defined(), *m.ws))) {
    // Given a packed source whose directory failed (an optional one that cannot be written),
    // the direct form where the private transform into Winograd's layout is slow (oneDNN's).
    PackedSource wp = packed;
    if (wp && !m.wino->layout_key().empty()) wp.key += "|" + m.wino->layout_key();
    const WinogradConv& wc = *m.wino;
    m.weight = weight_in_layout(weight, wc.weights_desc(), [&](const float* w, void* dst) { wc.pack(w, dst); }, wp,
                                &m.weight_shared, !packed || wc.fast_pack());
    if (m.weight.defined()) {
      m.impl_name = m.wino->impl_name();
      m.wino->bind(m.weight.data(), m.bias.defined() ? m.bias.f32() : nullptr);
      return;
    }
    m.wino.reset();
  }
  DIT_CHECK(!s.nearest2x_input, m.what << ": a nearest-2x input is computed only by the bf16 Winograd form (none here)");
  const int64_t OH = s.out_height(), OW = s.out_width();
  dnnl_call(m.what.c_str(), [&] {
    auto& eng = Engine::get().engine;
    memory::desc src_user({s.batch, s.in_channels, s.height, s.width}, idt, act);
    memory::desc dst_user({s.batch, s.out_channels, OH, OW}, dt::f32, act);
    // Channels last: the primitive works on x and y where they are (x in the compute type).
    memory::desc src_any({s.batch, s.in_channels, s.height, s.width}, cdt, s.nhwc ? tag::nhwc : tag::any);
    memory::desc dst_any({s.batch, s.out_channels, OH, OW}, dt::f32, s.nhwc ? tag::nhwc : tag::any);
    memory::desc w_any({s.out_channels, s.in_channels, s.kernel, s.kernel}, cdt, tag::any);
    memory::desc b_md({s.out_channels}, dt::f32, tag::a);
    dnnl::post_ops po;
    if (s.accumulate) po.append_sum(1.f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const memory::dims strides{s.stride, s.stride}, pad{s.row_padding(), s.padding};
    const bool has_bias = m.bias.defined();
    const auto& src_md = s.blocked || s.nhwc ? src_any : src_user;
    const auto& dst_md = s.blocked || s.nhwc ? dst_any : dst_user;
    auto d = has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, src_md, w_any, b_md,
                                                        dst_md, strides, pad, pad)
                      : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                        dnnl::algorithm::convolution_direct, src_md, w_any, dst_md,
                                                        strides, pad, pad);
    dnnl::convolution_forward::primitive_desc pd(d, attr, eng);
    m.impl_name = pd.impl_info_str();
    m.prim = dnnl::convolution_forward(pd);
    // Weights in the primitive's layout and type, once: mapped from the machine's entry, or a private copy.
    const memory::desc want = pd.weights_desc();
    m.weight = weight_in_layout(weight, want, [&](const float* w, void* dst) { pack_weight(w_user, w, want, dst); },
                                packed, &m.weight_shared);
    memory w_mem(pd.weights_desc(), eng, m.weight.data());
    m.user_src = memory(src_user, eng, nullptr);
    m.user_dst = memory(dst_user, eng, nullptr);
    m.reorder_src = pd.src_desc() != src_user;
    m.reorder_dst = pd.dst_desc() != dst_user;
    const size_t sp = pd.scratchpad_desc().get_size();
    m.ws->reserve(m.reorder_src ? pd.src_desc().get_size() : 0, m.reorder_dst ? pd.dst_desc().get_size() : 0, sp);
    // Buffers are bound in run(): a later convolution may grow the shared workspace.
    if (m.reorder_src) {
      m.src = memory(pd.src_desc(), eng, nullptr);
      m.src_in = dnnl::reorder(m.user_src, m.src);
      m.src_in_args = {{DNNL_ARG_FROM, m.user_src}, {DNNL_ARG_TO, m.src}};
    } else {
      m.src = m.user_src;
    }
    if (m.reorder_dst) {
      m.dst = memory(pd.dst_desc(), eng, nullptr);
      m.dst_out = dnnl::reorder(m.dst, m.user_dst);
      m.dst_out_args = {{DNNL_ARG_FROM, m.dst}, {DNNL_ARG_TO, m.user_dst}};
      if (s.accumulate) {
        m.dst_in = dnnl::reorder(m.user_dst, m.dst);
        m.dst_in_args = {{DNNL_ARG_FROM, m.user_dst}, {DNNL_ARG_TO, m.dst}};
      }
    } else {
      m.dst = m.user_dst;
    }
    m.args = {{DNNL_ARG_SRC, m.src}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, m.dst}};
    if (has_bias) m.args[DNNL_ARG_BIAS] = memory(b_md, eng, const_cast<float*>(m.bias.f32()));
    if (sp) {
      m.scratch = memory(pd.scratchpad_desc(), eng, nullptr);
      m.args[DNNL_ARG_SCRATCHPAD] = m.scratch;
    }
  });
}

void Conv2d::run(const float* x, float* y) const {
  DIT_CHECK(impl_ && impl_->spec.input == DType::F32, "Conv2d::run(f32 x) on a convolution that takes bf16 (or none)");
  run_any(x, y);
}

void Conv2d::run(const uint16_t* x, float* y) const {
  DIT_CHECK(impl_ && impl_->spec.input == DType::BF16, "Conv2d::run(bf16 x) on a convolution that takes f32 (or none)");
  run_any(x, y);
}

void Conv2d::run_rows(const RowSource& x, float* y) const {
  DIT_CHECK(impl_ && impl_->wino, "Conv2d::run_rows on a convolution that is not by Winograd");
  Impl& m = *impl_;  // the plan checks that it was made for a row source
  dnnl_call(m.what.c_str(), [&] { m.wino->run_rows(x, y, *m.ws); });
}

void Conv2d::run_any(const void* x, float* y) const {
  Impl& m = *impl_;
  dnnl_call(m.what.c_str(), [&] {
    if (m.wino) return m.wino->run(x, y, *m.ws);
    auto& st = Engine::get().stream;
    m.user_src.set_data_handle(const_cast<void*>(x));
    m.user_dst.set_data_handle(y);
    if (m.reorder_src) m.src.set_data_handle(m.ws->src());
    if (m.reorder_dst) m.dst.set_data_handle(m.ws->dst());
    if (m.scratch) m.scratch.set_data_handle(m.ws->scratch());
    if (m.reorder_src) execute(m.src_in, st, m.src_in_args);
    if (m.reorder_dst && m.spec.accumulate) execute(m.dst_in, st, m.dst_in_args);
    execute(m.prim, st, m.args);
    if (m.reorder_dst) execute(m.dst_out, st, m.dst_out_args);
    st.wait();
  });
}

const Conv2dSpec& Conv2d::spec() const { return impl_->spec; }
const std::string& Conv2d::impl_info() const { return impl_->impl_name; }
bool Conv2d::weight_shared() const { return impl_->weight_shared; }
bool Conv2d::uses_winograd() const { return impl_->wino != nullptr; }

}  // namespace dit
