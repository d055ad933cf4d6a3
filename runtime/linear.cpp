#include "runtime/linear.h"

#include <sstream>
#include <unordered_map>

#include "runtime/elementwise.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/packed_weights.h"
#include "runtime/profile.h"
#include "runtime/weight_cache.h"

namespace dit {

using dnnl::memory;
using dt = dnnl::memory::data_type;

LinearWeight LinearWeight::prepare(const Tensor& weight, const Tensor& bias, DType compute) {
  DIT_CHECK(weight.defined() && weight.ndim() == 2,
            "Linear weight must be a 2-D [out, in] tensor, got " << shape_str(weight.shape()));
  LinearWeight w;
  w.compute = compute;
  // Used in place when the stored type is the compute type (a view into the mmap, never written).
  w.weight = weight.dtype() == compute ? weight : weight.to(compute);
  if (bias.defined()) {
    DIT_CHECK(bias.numel() == weight.dim(0), "Linear bias has " << bias.numel() << " elements, weight "
                                                                << shape_str(weight.shape()) << " needs " << weight.dim(0));
    w.bias = bias.dtype() == DType::F32 ? bias : bias.to(DType::F32);
  }
  return w;
}

int64_t LinearWeight::in() const {
  if (!row_blocks.empty()) return row_blocks[0].dim(1);
  return cols > 0 ? cols : weight.dim(1);
}

int64_t LinearWeight::out() const {
  int64_t n = 0;
  for (const Tensor& b : row_blocks) n += b.dim(0);
  return row_blocks.empty() ? weight.dim(0) : n;
}

int64_t LinearWeight::ld() const { return row_blocks.empty() ? weight.dim(1) : in(); }

DType LinearWeight::dtype() const { return row_blocks.empty() ? weight.dtype() : row_blocks[0].dtype(); }

const void* LinearWeight::data() const {
  DIT_CHECK(weight.defined(), "LinearWeight::data of row blocks (stack them first)");
  return static_cast<const char*>(weight.data()) + size_t(col_begin) * dtype_size(weight.dtype());
}

LinearWeight LinearWeight::stacked() const {
  if (row_blocks.empty()) return *this;
  LinearWeight w = *this;
  w.weight = concat_rows(row_blocks);
  w.row_blocks.clear();
  w.packed = PackedSource{};  // a private copy: read as it is
  return w;
}

LinearWeight LinearWeight::stack(const std::vector<LinearWeight>& parts) {
  DIT_CHECK(!parts.empty(), "LinearWeight::stack: no parts");
  const LinearWeight& p0 = parts[0];
  bool packed = true;
  std::vector<Tensor> blocks, biases;
  for (const LinearWeight& p : parts) {
    DIT_CHECK(p.weight.defined() && p.row_blocks.empty() && p.cols == 0 && p.compute == p0.compute &&
                  p.weight.dtype() == p0.compute && p.in() == p0.in() && p.bias.defined() == p0.bias.defined(),
              "LinearWeight::stack: a part of another kind (" << shape_str(p.weight.shape()) << ")");
    packed = packed && bool(p.packed) && p.packed.dir == p0.packed.dir;
    blocks.push_back(p.weight);
    if (p.bias.defined()) biases.push_back(p.bias.reshape({p.out(), 1}));
  }
  LinearWeight w;
  w.compute = p0.compute;
  if (!biases.empty()) {
    Tensor b = concat_rows(biases);
    w.bias = b.reshape({b.dim(0)});
  }
  if (!packed) {
    w.weight = concat_rows(blocks);
    return w;
  }
  w.row_blocks = std::move(blocks);
  // The stack's content: the first part's key, and the others' (same directory) by a hash,
  // so that the header stays short whatever the paths.
  std::string rest;
  std::vector<std::function<size_t()>> releases;
  for (const LinearWeight& p : parts) {
    if (&p != &p0) rest += p.packed.key + "\n";
    if (p.packed.release_plain) releases.push_back(p.packed.release_plain);
  }
  w.packed = PackedSource(
      p0.packed.dir, p0.packed.key + "|stacked with " + hex16(fnv1a(rest)),
      [releases] {
        size_t n = 0;
        for (const auto& r : releases) n += r();
        return n;
      },
      p0.packed.source);
  return w;
}

static const char* act_name(Act a) {
  switch (a) {
    case Act::None: return "none";
    case Act::GeluTanh: return "gelu_tanh";
    case Act::Silu: return "silu";
  }
  return "?";
}

struct Linear::Impl {
  LinearSpec spec;
  LinearWeight w;
  std::string what;
  dnnl::matmul prim;
  memory src, wei, bias, dst, gate, mul, scratch;
  std::unordered_map<int, memory> args;
  Tensor scratch_buf;
  Tensor packed;  // weights in the primitive's layout (pack_weights: private; LinearWeight::packed: mapped)
  // bf16 compute: x (f32) -> xb (bf16) through a reorder created once.
  dnnl::reorder cvt;
  memory cvt_src;
  Tensor xb;
  std::unordered_map<int, memory> cvt_args;
  std::string impl_name;
  // gated_residual where oneDNN has only its reference matmul for the gated form (its
  // post-ops): a plain matmul into `tmp`, then y += gate * tmp here.
  bool manual_gate = false;
  Tensor tmp;
};

// The weights in the matmul's layout `want` (from `user`): a private copy reordered here
// (spec.pack_weights), or mapped from the machine's packed entry (w.packed); undefined when
// an optional entry failed. A block of columns whose entry failed is packed privately (what
// it would cost as a contiguous copy), since a strided weight read in place may take another
// kernel and give other bits. `note` says which, for impl_info().
static Tensor weights_in_layout(const LinearSpec& spec, const LinearWeight& w, const memory::desc& user,
                                const memory::desc& want, std::string& note) {
  if (!spec.pack_weights) {
    // Row blocks are stacked for the reorder only while their entry is made.
    auto fill = [&](void* dst) {
      const LinearWeight plain = w.stacked();
      pack_weight(user, plain.data(), want, dst);
    };
    Tensor t = w.packed.dir->get(w.packed.key, want, fill, w.packed.release_plain, w.packed.source);
    note = t.defined() ? " (packed weights, shared)" : "";
    if (t.defined() || w.cols == 0) return t;  // (row blocks without an entry: stacked by the caller)
  }
  Tensor t = Tensor::empty({int64_t((want.get_size() + 3) / 4)});
  pack_weight(user, w.data(), want, t.data());
  note = " (packed weights)";
  if (!spec.pack_weights && w.packed.release_plain) w.packed.release_plain();  // only the copy is read
  return t;
}

// "Linear [BxM, K] x [K, N] act=... <type> ...": what errors and impl_info() name.
static std::string describe_linear(const LinearSpec& spec, DType compute) {
  std::ostringstream os;
  os << "Linear [" << spec.batch << "x" << spec.rows << ", " << spec.in << "] x [" << spec.in << ", " << spec.out
     << "] act=" << act_name(spec.act) << (spec.gated_residual ? " gated_residual" : "")
     << (spec.accumulate ? " accumulate" : "") << (spec.multiply ? " multiply" : "") << " " << dtype_name(compute)
     << (spec.input == DType::BF16 ? " (bf16 x)" : "") << (spec.output == DType::BF16 ? " (bf16 y)" : "");
  return os.str();
}

// The spec and the weights agree and ask for something this Linear does; else one error
// naming the layer.
static void check_linear(const LinearSpec& spec, const LinearWeight& w, const std::string& what) {
  DIT_CHECK(spec.batch > 0 && spec.rows > 0 && spec.in > 0 && spec.out > 0, what << ": bad sizes");
  DIT_CHECK(w.defined() && w.in() == spec.in && w.out() == spec.out,
            what << ": weight is [" << (w.defined() ? w.out() : 0) << ", " << (w.defined() ? w.in() : 0) << "]");
  DIT_CHECK(w.dtype() == w.compute, what << ": weight dtype does not match the compute type");
  for (const Tensor& b : w.row_blocks)
    DIT_CHECK(b.ndim() == 2 && b.dim(1) == w.in() && b.dtype() == w.compute,
              what << ": a row block " << shape_str(b.shape()) << " " << dtype_name(b.dtype()));
  DIT_CHECK(w.cols == 0 || (w.row_blocks.empty() && w.col_begin >= 0 && w.col_begin + w.cols <= w.ld()),
            what << ": columns [" << w.col_begin << ", " << w.col_begin + w.cols << ") of a weight "
                   << shape_str(w.weight.shape()));
  const int64_t N = spec.out, ldy = spec.out_stride > 0 ? spec.out_stride : N;
  DIT_CHECK(ldy >= N && (ldy == N || !spec.gated_residual), what << ": bad out_stride " << spec.out_stride);
  DIT_CHECK(int(spec.gated_residual) + int(spec.accumulate) + int(spec.multiply) <= 1,
            what << ": gated_residual, accumulate and multiply exclude each other");
  DIT_CHECK(!spec.gate_after_matmul || spec.gated_residual, what << ": gate_after_matmul needs gated_residual");
  DIT_CHECK((spec.input == DType::F32 || spec.input == DType::BF16) &&
                (spec.output == DType::F32 || spec.output == DType::BF16),
            what << ": input and output are f32 or bf16");
  DIT_CHECK((spec.input == DType::F32 && spec.output == DType::F32) || w.compute == DType::BF16,
            what << ": bf16 input or output needs bf16 compute");
  DIT_CHECK(spec.output == DType::F32 || (!spec.gated_residual && !spec.accumulate && !spec.multiply),
            what << ": a bf16 output is the plain form only");
}

Linear::Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;
Linear::~Linear() = default;

Linear::Linear(const LinearSpec& spec, const LinearWeight& w_in) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.spec = spec;
  // Row blocks are read from their packed entry only; else stacked into a private copy here.
  LinearWeight w = w_in.packed && !spec.pack_weights ? w_in : w_in.stacked();
  m.what = describe_linear(spec, w.compute);
  check_linear(spec, w, m.what);
  const int64_t B = spec.batch, M = spec.rows, K = spec.in, N = spec.out, ldw = w.ld();
  const int64_t ldy = spec.out_stride > 0 ? spec.out_stride : N;
  require_compute(w.compute);
  const dt cdt = w.compute == DType::BF16 ? dt::bf16 : dt::f32;
  const dt ydt = spec.output == DType::BF16 ? dt::bf16 : dt::f32;
  dnnl_call(m.what.c_str(), [&] {
    auto& eng = Engine::get().engine;
    memory::desc src_md, wei_md, bias_md, dst_md, gate_md, mul_md;
    const bool has_bias = w.bias.defined();
    dnnl::primitive_attr attr;
    dnnl::matmul::primitive_desc pd;
    // The gated form: one batch element per execution (its gate a broadcast row, then the
    // residual sum, as post-ops), so an element's result does not depend on the rest of the
    // batch (a CFG-parallel rank's batch of one gives the serial run's bits) and the weights
    // take the dense 2-D form's blocked layout. The plain form: all rows at once, or with
    // manual_gate one batch element per execution too.
    auto describe = [&](bool gated, bool pack) {
      const int64_t R = gated || m.manual_gate ? M : B * M;
      src_md = memory::desc({R, K}, cdt, memory::dims{K, 1});
      wei_md = memory::desc({K, N}, cdt, memory::dims{1, ldw});
      bias_md = memory::desc({1, N}, dt::f32, memory::dims{N, 1});
      dst_md = memory::desc({R, N}, gated ? dt::f32 : ydt, memory::dims{gated ? N : ldy, 1});
      gate_md = gated ? memory::desc({1, N}, dt::f32, memory::dims{N, 1}) : memory::desc();
      if (spec.multiply) mul_md = memory::desc({B * M, N}, dt::f32, memory::dims{N, 1});
      dnnl::post_ops po;
      if (spec.act == Act::GeluTanh) po.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f);
      if (spec.act == Act::Silu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_swish, 1.f, 0.f);
      if (gated) {
        po.append_binary(dnnl::algorithm::binary_mul, gate_md);
        po.append_sum(1.f);
      }
      if (spec.accumulate) po.append_sum(1.f);
      if (spec.multiply) po.append_binary(dnnl::algorithm::binary_mul, mul_md);
      attr = dnnl::primitive_attr();
      attr.set_post_ops(po);
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const memory::desc wei_any = pack ? memory::desc(wei_md.dims(), cdt, memory::format_tag::any) : wei_md;
      auto d = has_bias ? dnnl::matmul::desc(src_md, wei_any, bias_md, dst_md)
                        : dnnl::matmul::desc(src_md, wei_any, dst_md);
      return dnnl::matmul::primitive_desc(d, attr, eng);
    };
    const bool pack = spec.pack_weights || bool(w.packed);
    m.manual_gate = spec.gated_residual && spec.gate_after_matmul;
    pd = describe(spec.gated_residual && !m.manual_gate, pack);
    if (spec.gated_residual && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
      m.manual_gate = true;  // the reference matmul is ~100x slower than a jit GEMM
      pd = describe(false, pack);
    }
    if (m.manual_gate) m.tmp = Tensor::empty({M, N});
    std::string packed_note;
    // A bf16 matmul multiplies its weights in pairs of rows (VNNI), so where it asks for a plain
    // layout (e.g. with a strided output, served by gemm:jit) it copies them at every call
    // whichever layout they are in: packing then only changes where that copy reads from,
    // measured slower than reading them in place (dit-kernel-bench: the gated linears' former
    // batched form, 0.89-0.95x on the VM). Column blocks are packed whatever the layout (they
    // are strided views).
    if (pack && w.compute == DType::BF16 && w.cols == 0 && !has_inner_blocks(pd.weights_desc()))
      pd = describe(spec.gated_residual && !m.manual_gate, false);
    if (pack && pd.weights_desc() != wei_md) {
      m.packed = weights_in_layout(spec, w, wei_md, pd.weights_desc(), packed_note);
      if (!m.packed.defined()) pd = describe(spec.gated_residual && !m.manual_gate, false);  // in place after all
    }
    if (!m.packed.defined()) w = w.stacked();  // read in place: row blocks stacked privately (else a no-op)
    m.impl_name = std::string(pd.impl_info_str()) + (m.manual_gate ? " (gate applied after the matmul)" : "") + packed_note;
    m.prim = dnnl::matmul(pd);
    m.src = memory(src_md, eng, nullptr);
    m.wei = m.packed.defined() ? memory(pd.weights_desc(), eng, m.packed.data())
                               : memory(wei_md, eng, const_cast<void*>(w.data()));
    m.dst = memory(dst_md, eng, nullptr);
    m.args = {{DNNL_ARG_SRC, m.src}, {DNNL_ARG_WEIGHTS, m.wei}, {DNNL_ARG_DST, m.dst}};
    if (has_bias) {
      m.bias = memory(bias_md, eng, const_cast<float*>(w.bias.f32()));
      m.args[DNNL_ARG_BIAS] = m.bias;
    }
    if (spec.gated_residual && !m.manual_gate) {
      m.gate = memory(gate_md, eng, nullptr);
      m.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(spec.act != Act::None ? 1 : 0) | DNNL_ARG_SRC_1] = m.gate;
    }
    if (spec.multiply) {
      m.mul = memory(mul_md, eng, nullptr);
      m.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(spec.act != Act::None ? 1 : 0) | DNNL_ARG_SRC_1] = m.mul;
    }
    size_t sp = pd.scratchpad_desc().get_size();
    if (sp) {
      m.scratch_buf = Tensor::empty({int64_t((sp + 3) / 4)});
      m.scratch = memory(pd.scratchpad_desc(), eng, m.scratch_buf.data());
      m.args[DNNL_ARG_SCRATCHPAD] = m.scratch;
    }
    if (cdt == dt::bf16 && spec.input == DType::F32) {
      memory::desc xf_md({B * M, K}, dt::f32, memory::dims{K, 1});
      memory::desc xb_md({B * M, K}, dt::bf16, memory::dims{K, 1});
      m.xb = Tensor::empty({B * M, K}, DType::BF16);
      m.cvt_src = memory(xf_md, eng, nullptr);
      memory xb_mem(xb_md, eng, m.xb.data());
      m.cvt = dnnl::reorder(dnnl::reorder::primitive_desc(eng, xf_md, eng, xb_md));
      m.cvt_args = {{DNNL_ARG_FROM, m.cvt_src}, {DNNL_ARG_TO, xb_mem}};
      m.src.set_data_handle(m.xb.data());
    }
  });
  m.w = std::move(w);  // (row blocks stacked where they are read as they are)
}

void Linear::run(const float* x, float* y, const float* gate, const float* mul) const {
  run_any(x, DType::F32, y, DType::F32, gate, mul);
}
void Linear::run(const uint16_t* x, float* y, const float* gate, const float* mul) const {
  run_any(x, DType::BF16, y, DType::F32, gate, mul);
}
void Linear::run(const float* x, uint16_t* y) const { run_any(x, DType::F32, y, DType::BF16, nullptr, nullptr); }
void Linear::run(const uint16_t* x, uint16_t* y) const { run_any(x, DType::BF16, y, DType::BF16, nullptr, nullptr); }

void Linear::run_any(const void* x, DType xt, void* y, DType yt, const float* gate, const float* mul) const {
  DIT_CHECK(impl_, "Linear::run on an empty Linear");
  profile::Scope prof(profile::Cat::Linear);
  Impl& m = *impl_;
  DIT_CHECK(xt == m.spec.input && yt == m.spec.output,
            m.what << ": run with " << dtype_name(xt) << " x and " << dtype_name(yt) << " y, made for "
                   << dtype_name(m.spec.input) << " and " << dtype_name(m.spec.output));
  DIT_CHECK(!m.spec.gated_residual || gate, m.what << ": gated_residual needs a gate");
  DIT_CHECK(!m.spec.multiply || mul, m.what << ": multiply needs its operand m");
  const bool convert = m.w.compute == DType::BF16 && xt == DType::F32;
  const void* xm = convert ? m.xb.data() : x;  // what the matmul reads
  dnnl_call(m.what.c_str(), [&] {
    auto& s = Engine::get().stream;
    if (convert) {
      m.cvt_src.set_data_handle(const_cast<void*>(x));
      execute(m.cvt, s, m.cvt_args);
    }
    m.src.set_data_handle(const_cast<void*>(xm));
    if (m.spec.gated_residual) {  // per batch element b: y[b] += gate[b] * act(x[b] W^T + bias)
      const int64_t M = m.spec.rows, K = m.spec.in, N = m.spec.out;
      const size_t xbytes = dtype_size(m.w.compute);  // the matmul's x: f32, or bf16 (given or converted)
      for (int64_t b = 0; b < m.spec.batch; ++b) {
        float* yb = static_cast<float*>(y) + b * M * N;
        m.src.set_data_handle(const_cast<char*>(static_cast<const char*>(xm)) + size_t(b * M * K) * xbytes);
        if (m.manual_gate) {  // tmp = act(x[b] W^T + bias), then the gated sum here
          m.dst.set_data_handle(m.tmp.f32());
          execute(m.prim, s, m.args);
          s.wait();
          gated_residual_add(m.tmp.f32(), gate + b * N, yb, 1, M, N);
        } else {
          m.dst.set_data_handle(yb);
          m.gate.set_data_handle(const_cast<float*>(gate + b * N));
          execute(m.prim, s, m.args);
        }
      }
      s.wait();
      return;
    }
    m.dst.set_data_handle(y);
    if (m.spec.multiply) m.mul.set_data_handle(const_cast<float*>(mul));
    execute(m.prim, s, m.args);
    s.wait();
  });
}

void Linear::set_weight(const LinearWeight& w) {
  DIT_CHECK(impl_, "Linear::set_weight on an empty Linear");
  Impl& m = *impl_;
  DIT_CHECK(!m.packed.defined() && !m.spec.pack_weights, m.what << ": set_weight with packed weights");
  DIT_CHECK(w.weight.defined() && w.in() == m.spec.in && w.out() == m.spec.out && w.compute == m.w.compute &&
                w.weight.dtype() == m.w.compute && w.bias.defined() == m.w.bias.defined() && w.ld() == m.w.ld(),
            m.what << ": set_weight: weight " << shape_str(w.weight.shape()) << " " << dtype_name(w.weight.dtype())
                   << (w.bias.defined() ? " with bias" : " without bias") << " does not fit");
  m.w = w;
  m.wei.set_data_handle(const_cast<void*>(m.w.data()));
  if (m.w.bias.defined()) m.bias.set_data_handle(const_cast<float*>(m.w.bias.f32()));
}

const LinearSpec& Linear::spec() const { return impl_->spec; }
const std::string& Linear::impl_info() const { return impl_->impl_name; }
double Linear::flops() const {
  const auto& s = impl_->spec;
  return 2.0 * s.batch * s.rows * s.in * s.out;
}

}  // namespace dit
