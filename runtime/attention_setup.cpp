// Attention's constructor (runtime/attention.h): the spec's defaults, the block sizes, the
// layouts the block matmuls read, their oneDNN primitives (created once, for one thread each)
// and every thread's buffers. The runs are in attention.cpp.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "runtime/attention.h"
#include "runtime/attention_impl.h"
#include "runtime/error.h"

namespace dit {

using dnnl::memory;
using dt = dnnl::memory::data_type;

namespace {

// The spec with its defaults filled in: dense [batch, heads, tokens, head_dim] layouts where
// none is given, and scale 1/sqrt(head_dim).
AttentionSpec with_defaults(AttentionSpec s) {
  auto is_zero = [](const AttnLayout& l) { return l.batch_stride == 0 && l.head_stride == 0 && l.token_stride == 0; };
  if (is_zero(s.q)) s.q = AttnLayout::bhtd(s.heads, s.q_len, s.head_dim);
  if (is_zero(s.k)) s.k = AttnLayout::bhtd(s.heads, s.kv_len, s.head_dim);
  if (is_zero(s.v)) s.v = AttnLayout::bhtd(s.heads, s.kv_len, s.head_dim);
  if (is_zero(s.out)) s.out = AttnLayout::bhtd(s.heads, s.q_len, s.head_dim);
  if (s.scale == 0) s.scale = 1.f / std::sqrt(float(s.head_dim));
  return s;
}

bool is_dense(const AttnLayout& l, int64_t H, int64_t T, int64_t D) {
  const AttnLayout d = AttnLayout::bhtd(H, T, D);
  return l.batch_stride == d.batch_stride && l.head_stride == d.head_stride && l.token_stride == d.token_stride;
}

// The block matmuls Q·Kᵀ (times qk_scale, unless 1, reducing over Dqk) and P·V for blocks of qr
// query rows and kc keys, reading q, k and v in the layouts eq, ek and ev.
BlockPrims make_block_prims(const AttentionSpec& s, const AttnLayout& eq, const AttnLayout& ek, const AttnLayout& ev,
                            int64_t qr, int64_t kc, int64_t KB, int64_t Dqk, float qk_scale) {
  auto& eng = Engine::get().engine;
  const int64_t D = s.head_dim;
  const dt cdt = s.compute == DType::BF16 ? dt::bf16 : dt::f32;
  BlockPrims p;
  p.qk_src = memory::desc({qr, Dqk}, cdt, memory::dims{eq.token_stride, 1});
  p.qk_wei = memory::desc({Dqk, kc}, cdt, memory::dims{1, ek.token_stride});
  p.qk_dst = memory::desc({qr, kc}, dt::f32, memory::dims{KB, 1});
  p.pv_src = memory::desc({qr, kc}, cdt, memory::dims{KB, 1});
  p.pv_wei = memory::desc({kc, D}, cdt, memory::dims{ev.token_stride, 1});
  p.pv_dst = memory::desc({qr, D}, dt::f32, memory::dims{D, 1});
  dnnl::primitive_attr qk_attr;
  qk_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (qk_scale != 1.f) qk_attr.set_output_scales(0, {qk_scale});
  dnnl::matmul::primitive_desc qk_pd(dnnl::matmul::desc(p.qk_src, p.qk_wei, p.qk_dst), qk_attr, eng);
  dnnl::primitive_attr pv_attr;
  pv_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::primitive_desc pv_pd(dnnl::matmul::desc(p.pv_src, p.pv_wei, p.pv_dst), pv_attr, eng);
  p.qk = dnnl::matmul(qk_pd);
  p.pv = dnnl::matmul(pv_pd);
  p.qk_sp = qk_pd.scratchpad_desc();
  p.pv_sp = pv_pd.scratchpad_desc();
  p.impl = std::string("qk: ") + qk_pd.impl_info_str() + ", pv: " + pv_pd.impl_info_str();
  return p;
}

// A thread's memory objects for the block matmuls p: the logits into S, P into P·V, P·V into
// PV; q, k and v bound per block. sp: the thread's scratchpad.
ThreadState::Args make_thread_args(const BlockPrims& p, const ThreadState& T, void* sp) {
  auto& eng = Engine::get().engine;
  ThreadState::Args A;
  A.qk_src = memory(p.qk_src, eng, nullptr);
  A.qk_wei = memory(p.qk_wei, eng, nullptr);
  A.qk_dst = memory(p.qk_dst, eng, T.S);
  A.pv_src = memory(p.pv_src, eng, T.P);
  A.pv_wei = memory(p.pv_wei, eng, nullptr);
  A.pv_dst = memory(p.pv_dst, eng, T.PV);
  A.qk = {{DNNL_ARG_SRC, A.qk_src}, {DNNL_ARG_WEIGHTS, A.qk_wei}, {DNNL_ARG_DST, A.qk_dst}};
  A.pv = {{DNNL_ARG_SRC, A.pv_src}, {DNNL_ARG_WEIGHTS, A.pv_wei}, {DNNL_ARG_DST, A.pv_dst}};
  if (p.qk_sp.get_size()) A.qk[DNNL_ARG_SCRATCHPAD] = memory(p.qk_sp, eng, sp);
  if (p.pv_sp.get_size()) A.pv[DNNL_ARG_SCRATCHPAD] = memory(p.pv_sp, eng, sp);
  return A;
}

}  // namespace

QkPad parse_qk_pad(const std::string& what, const std::string& value) {
  if (value == "on") return QkPad::On;
  if (value == "off") return QkPad::Off;
  if (value == "auto") return QkPad::Auto;
  DIT_FAIL(what << ": '" << value << "' (expected on, off or auto)");
}

bool qk_pad_by_default() {
  static const bool pad = [] {
    const char* env = std::getenv("DIT_BF16_QK_PAD");
    const QkPad p = env ? parse_qk_pad("DIT_BF16_QK_PAD", env) : QkPad::Auto;
    if (p != QkPad::Auto) return p == QkPad::On;
    return amx_available();
  }();
  return pad;
}

Attention::Attention(const AttentionSpec& spec_in) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  std::ostringstream os;
  os << "Attention batch " << spec_in.batch << " heads " << spec_in.heads << " q_len " << spec_in.q_len << " kv_len "
     << spec_in.kv_len << " head_dim " << spec_in.head_dim << " " << dtype_name(spec_in.compute);
  m.what = os.str();
  DIT_CHECK(spec_in.batch > 0 && spec_in.heads > 0 && spec_in.q_len > 0 && spec_in.kv_len > 0 && spec_in.head_dim > 0,
            m.what << ": bad sizes");
  require_compute(spec_in.compute);
  m.spec = with_defaults(spec_in);
  const AttentionSpec& s = m.spec;
  DIT_CHECK(std::isfinite(s.scale) && s.scale > 0, m.what << ": scale " << s.scale << " (expected > 0)");
  const int64_t D = s.head_dim;
  const bool bf16 = s.compute == DType::BF16;
  DIT_CHECK(s.bf16_qk_pad != QkPad::On || bf16, m.what << ": bf16_qk_pad On needs bf16 compute");
  // (Auto reads DIT_BF16_QK_PAD in f32 too: a value it does not take is an error there as well.)
  const bool pad_auto = s.bf16_qk_pad == QkPad::Auto && qk_pad_by_default();
  const bool pad = bf16 && (s.bf16_qk_pad == QkPad::On || pad_auto);
  m.Dqk = pad ? (D + 31) / 32 * 32 : D;
  m.dense = (!bf16 || is_dense(s.q, s.heads, s.q_len, D)) && is_dense(s.k, s.heads, s.kv_len, D) &&
            is_dense(s.v, s.heads, s.kv_len, D);
  m.choose_blocks();
  m.choose_layouts();
  (bf16 && !s.bf16_scale_in_qk ? m.softmax_scale : m.qk_scale) = s.scale;
  m.nthr = std::max(1, omp_get_max_threads());
  dnnl_call(m.what.c_str(), [&] {
    // The block matmuls run inside our OpenMP parallel region, where oneDNN runs single-threaded;
    // create them for one thread so that their work partition matches.
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    struct Restore {
      int n;
      ~Restore() { omp_set_num_threads(n); }
    } restore{saved_threads};
    m.make_prims();
    m.make_threads();
  });
}

// Defaults measured with dit-kernel-bench (16 heads x 72, 256/1024/4096 tokens, 2 threads;
// `--sweep`): bf16 256 x 512 blocks, 5–8% faster than 128 x 256 (a block's fixed cost is half
// the share); f32 128 x 512, 2% faster than 64 x 512 (128 x 1024 is faster at 1024 tokens
// but slower at 4096). docs/benchmarks.md, "Attention's blocks".
void Attention::Impl::choose_blocks() {
  const bool bf16 = spec.compute == DType::BF16;
  QB = std::min(spec.q_block > 0 ? spec.q_block : int64_t(bf16 ? 256 : 128), spec.q_len);
  KB = std::min(spec.kv_block > 0 ? spec.kv_block : int64_t(512), spec.kv_len);
  nqb = (spec.q_len + QB - 1) / QB;
  nkb = (spec.kv_len + KB - 1) / KB;
  q_tail = spec.q_len - (nqb - 1) * QB;
  kv_tail = spec.kv_len - (nkb - 1) * KB;
}

// The layouts the matmuls read: bf16 reads dense bf16 copies of q, k and v (made per run; q's
// and k's rows Dqk long, the pad zeroed here once and never written again); f32 reads the
// spec's, except long strided K/V, copied to dense buffers.
void Attention::Impl::choose_layouts() {
  const AttentionSpec& s = spec;
  const int64_t D = s.head_dim;
  if (s.compute == DType::BF16) {
    eq = AttnLayout::bhtd(s.heads, s.q_len, Dqk);
    ek = AttnLayout::bhtd(s.heads, s.kv_len, Dqk);
    ev = AttnLayout::bhtd(s.heads, s.kv_len, D);
    qb = Tensor::empty({s.batch, s.heads, s.q_len, Dqk}, DType::BF16);
    kb = Tensor::empty({s.batch, s.heads, s.kv_len, Dqk}, DType::BF16);
    vb = Tensor::empty({s.batch, s.heads, s.kv_len, D}, DType::BF16);
    if (Dqk != D) {
      std::memset(qb.data(), 0, qb.nbytes());
      std::memset(kb.data(), 0, kb.nbytes());
    }
    return;
  }
  eq = s.q;
  ek = s.k;
  ev = s.v;
  // Strided K/V rows (e.g. a fused QKV buffer) put every key in its own page once the rows
  // are several KB apart; at long sequences the TLB misses halve the speed (measured at
  // 4096 tokens, ~10%). Copy them to dense buffers once per run: O(kv·d) next to O(q·kv·d);
  // below 2048 keys the copy costs more than it saves.
  if ((s.k.token_stride != D || s.v.token_stride != D) && s.kv_len >= 2048) {
    pack_kv = true;
    ek = ev = AttnLayout::bhtd(s.heads, s.kv_len, D);
    kd = Tensor::empty({s.batch, s.heads, s.kv_len, D});
    vd = Tensor::empty({s.batch, s.heads, s.kv_len, D});
  }
}

// The block matmuls for full blocks and, where the lengths leave them, the tail blocks; one
// scratchpad per thread, as large as the largest asks.
void Attention::Impl::make_prims() {
  size_t sp_max = 0;
  for (int qi = 0; qi < 2; ++qi)
    for (int ki = 0; ki < 2; ++ki) {
      const int64_t qr = qi ? q_tail : QB, kc = ki ? kv_tail : KB;
      if ((qi && qr == QB) || (ki && kc == KB)) continue;  // no distinct tail
      prims[qi][ki] = make_block_prims(spec, eq, ek, ev, qr, kc, KB, Dqk, qk_scale);
      const BlockPrims& p = prims[qi][ki];
      sp_max = std::max({sp_max, p.qk_sp.get_size(), p.pv_sp.get_size()});
    }
  impl_name = prims[0][0].impl;
  scratch_per_thread = (sp_max + 63) / 64 * 64;
  if (scratch_per_thread) scratch_buf = Tensor::empty({int64_t(scratch_per_thread / 4) * nthr});
}

// Each thread's stream, buffers (S, P, PV, O, m, l, a; 64-byte aligned) and memory objects.
void Attention::Impl::make_threads() {
  const int64_t D = spec.head_dim;
  const size_t pf = spec.compute == DType::BF16 ? (size_t(QB * KB) + 1) / 2 : size_t(QB * KB);
  auto r16 = [](size_t n) { return (n + 15) / 16 * 16; };  // keep each buffer 64-byte aligned
  const size_t pad_q = Dqk != D ? (size_t(QB * Dqk) + 1) / 2 : 0, pad_k = Dqk != D ? (size_t(KB * Dqk) + 1) / 2 : 0;
  thread_floats = r16(QB * KB) + r16(pf) + 2 * r16(QB * D) + 3 * r16(QB) + r16(pad_q) + r16(pad_k);
  thread_buf = Tensor::empty({int64_t(thread_floats) * nthr});
  th.resize(nthr);
  for (int t = 0; t < nthr; ++t) {
    ThreadState& T = th[t];
    T.stream = dnnl::stream(Engine::get().engine);
    float* b = thread_buf.f32() + t * thread_floats;
    auto take = [&b](size_t n) {
      float* p = b;
      b += n;
      return p;
    };
    T.S = take(r16(QB * KB));
    T.P = take(r16(pf));
    T.PV = take(r16(QB * D));
    T.O = take(r16(QB * D));
    T.m = take(r16(QB));
    T.l = take(r16(QB));
    T.a = take(r16(QB));
    if (Dqk != D) {  // the pads stay zero: a block writes the first D of each row
      T.qpad = reinterpret_cast<uint16_t*>(take(r16(pad_q)));
      T.kpad = reinterpret_cast<uint16_t*>(take(r16(pad_k)));
      std::memset(T.qpad, 0, r16(pad_q) * 4);
      std::memset(T.kpad, 0, r16(pad_k) * 4);
    }
    void* sp = scratch_per_thread ? static_cast<char*>(scratch_buf.data()) + t * scratch_per_thread : nullptr;
    for (int qi = 0; qi < 2; ++qi)
      for (int ki = 0; ki < 2; ++ki)
        if (prims[qi][ki].qk) T.args[qi][ki] = make_thread_args(prims[qi][ki], T, sp);
  }
}

}  // namespace dit
