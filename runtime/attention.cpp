#include "runtime/attention.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "runtime/elementwise.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"
#include "runtime/simd_math.h"
#include "runtime/softmax_row.h"

namespace dit {

using dnnl::memory;
using dt = dnnl::memory::data_type;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One block matmul shape (rows of Q × columns of K) for Q·Kᵀ and for P·V.
struct BlockPrims {
  dnnl::matmul qk, pv;
  memory::desc qk_src, qk_wei, qk_dst, pv_src, pv_wei, pv_dst;
  memory::desc qk_sp, pv_sp;
};

// Per-thread memory objects (handles are set per block) and buffers.
struct ThreadState {
  dnnl::stream stream;
  struct Args {
    memory qk_src, qk_wei, qk_dst, pv_src, pv_wei, pv_dst;
    std::unordered_map<int, memory> qk, pv;
  } args[2][2];
  float* S = nullptr;   // [QB, KB] scaled logits
  void* P = nullptr;    // [QB, KB] probabilities in the compute type
  float* PV = nullptr;  // [QB, D]
  float* O = nullptr;   // [QB, D] running output
  float* m = nullptr;   // [QB] running max
  float* l = nullptr;   // [QB] running sum
  float* a = nullptr;   // [QB] rescale factor of this block
  AttentionPhases phases;
};

double seconds_since(std::chrono::steady_clock::time_point& t) {
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}

void softmax_block(const float* S, float* P, int64_t rows, int64_t cols, int64_t ld, float* m, float* l, float* a) {
  for (int64_t i = 0; i < rows; ++i) softmax_row(S + i * ld, P + i * ld, cols, m + i, l + i, a + i);
}

// bf16: probabilities computed in f32 and stored rounded to bf16 for P·V, in one pass.
void softmax_block_bf16(const float* S, uint16_t* P, int64_t rows, int64_t cols, int64_t ld, float* m, float* l,
                        float* a) {
  for (int64_t i = 0; i < rows; ++i) softmax_row_bf16(S + i * ld, P + i * ld, cols, m + i, l + i, a + i);
}

// s[j] = max(s[j] + (head[j] + key[j]), -FLT_MAX) over one block row; head or key may be
// null. The clamp keeps masked logits finite (two very negative terms could reach -inf,
// and a block of -inf logits would make the online softmax's exp(m_old - m_new) NaN).
DIT_MULTIVERSION void add_bias_row(float* s, const float* head, const float* key, int64_t n) {
  constexpr float lo = -std::numeric_limits<float>::max();
  if (head && key) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float v = s[j] + (head[j] + key[j]);
      s[j] = v < lo ? lo : v;
    }
  } else {
    const float* b = head ? head : key;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float v = s[j] + b[j];
      s[j] = v < lo ? lo : v;
    }
  }
}

DIT_MULTIVERSION void rescale_row(float* o, const float* pv, float al, int64_t D) {
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) o[j] = o[j] * al + pv[j];
}

void rescale_add(float* O, const float* PV, const float* a, int64_t rows, int64_t D, bool first) {
  if (first) {
    std::memcpy(O, PV, sizeof(float) * rows * D);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) rescale_row(O + i * D, PV + i * D, a[i], D);
}

// A finished output row: o = acc·(1/l), in f32 or rounded to bf16 (nearest even, as f32_to_bf16).
DIT_MULTIVERSION void store_row(const float* acc, float inv, float* o, int64_t D) {
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) o[j] = acc[j] * inv;
}

DIT_MULTIVERSION void store_row_bf16(const float* acc, float inv, uint16_t* o, int64_t D) {
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) o[j] = f32_to_bf16_rne(acc[j] * inv);
}

}  // namespace

struct Attention::Impl {
  AttentionSpec spec;
  std::string what, impl_name;
  int64_t QB = 0, KB = 0, nqb = 0, nkb = 0, q_tail = 0, kv_tail = 0;
  AttnLayout eq, ek, ev;  // layouts the matmuls read (user's for f32, dense bhtd bf16 copies for bf16)
  BlockPrims prims[2][2];  // [q tail?][kv tail?]
  int nthr = 1;
  std::vector<ThreadState> th;
  Tensor thread_buf, scratch_buf;
  size_t scratch_per_thread = 0, thread_floats = 0;
  Tensor qb, kb, vb;  // bf16 copies (bf16 compute only)
  double prepare_s = 0;  // wall time of the copies before the blocks (AttentionPhases::prepare)
  bool pack_kv = false;  // f32: K/V copied to dense [batch, heads, kv_len, head_dim] per run
  Tensor kd, vd;
  bool dense = false;  // the spec's q, k, v are dense bhtd: run_dense may be used

  // One run over the blocks: q, k, v in the matmuls' layouts (eq, ek, ev); out f32, or bf16
  // (out16) rounded to nearest even, in the spec's out layout; lse, bias and carry optional.
  // With carry, the rows' online softmax continues from and/or into carry's m, l and the
  // unnormalised out (run_dense_part).
  struct BlockRun {
    const char *q, *k, *v;
    void* out;
    bool out16;
    float* lse;
    const AttnBias* bias;
    const AttentionCarry* carry;
  };
  // A task's rows: q block [q0, q0 + rows) of (batch b, head h); o0 the first row's element in
  // out, r0 its index in lse / m / l.
  struct TaskRows {
    int64_t b = 0, h = 0, q0 = 0, rows = 0, o0 = 0, r0 = 0;
  };
  void run_blocks(const BlockRun& r);
  void run_task(ThreadState& T, int64_t task, const BlockRun& r);
  void start_rows(ThreadState& T, const BlockRun& r, const TaskRows& t) const;
  void add_block_bias(ThreadState& T, const AttnBias& bias, const TaskRows& t, int64_t k0, int64_t kc) const;
  void finish_rows(ThreadState& T, const BlockRun& r, const TaskRows& t) const;
};

namespace {

static_assert(std::tuple_size<decltype(AttentionPhases{}.values())>::value == profile::kAttentionPhases);

// While the profiler is on (dit-bench's breakdown), hands it the phases of one run: a
// snapshot at construction, the difference at destruction.
class ProfilePhases {
 public:
  explicit ProfilePhases(const Attention& a) : a_(profile::enabled() ? &a : nullptr) {
    if (a_) before_ = a_->phases().values();
  }
  ~ProfilePhases() {
    if (!a_) return;
    const std::array<double, 6> now = a_->phases().values();
    double d[profile::kAttentionPhases];
    for (int i = 0; i < profile::kAttentionPhases; ++i) d[i] = now[size_t(i)] - before_[size_t(i)];
    profile::add_attention_phases(d);
  }

 private:
  const Attention* a_;
  std::array<double, 6> before_{};
};
}  // namespace

Attention::Attention() = default;
Attention::Attention(Attention&&) noexcept = default;
Attention& Attention::operator=(Attention&&) noexcept = default;
Attention::~Attention() = default;

Attention::Attention(const AttentionSpec& spec_in) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  AttentionSpec s = spec_in;
  std::ostringstream os;
  os << "Attention batch " << s.batch << " heads " << s.heads << " q_len " << s.q_len << " kv_len " << s.kv_len
     << " head_dim " << s.head_dim << " " << dtype_name(s.compute);
  m.what = os.str();
  DIT_CHECK(s.batch > 0 && s.heads > 0 && s.q_len > 0 && s.kv_len > 0 && s.head_dim > 0, m.what << ": bad sizes");
  auto is_zero = [](const AttnLayout& l) { return l.batch_stride == 0 && l.head_stride == 0 && l.token_stride == 0; };
  if (is_zero(s.q)) s.q = AttnLayout::bhtd(s.heads, s.q_len, s.head_dim);
  if (is_zero(s.k)) s.k = AttnLayout::bhtd(s.heads, s.kv_len, s.head_dim);
  if (is_zero(s.v)) s.v = AttnLayout::bhtd(s.heads, s.kv_len, s.head_dim);
  if (is_zero(s.out)) s.out = AttnLayout::bhtd(s.heads, s.q_len, s.head_dim);
  if (s.scale == 0) s.scale = 1.f / std::sqrt(float(s.head_dim));
  m.spec = s;
  auto is_dense = [](const AttnLayout& l, int64_t H, int64_t T, int64_t D) {
    const AttnLayout d = AttnLayout::bhtd(H, T, D);
    return l.batch_stride == d.batch_stride && l.head_stride == d.head_stride && l.token_stride == d.token_stride;
  };
  m.dense = (s.compute == DType::F32 || is_dense(s.q, s.heads, s.q_len, s.head_dim)) &&
            is_dense(s.k, s.heads, s.kv_len, s.head_dim) && is_dense(s.v, s.heads, s.kv_len, s.head_dim);
  const int64_t D = s.head_dim;
  const bool bf16 = s.compute == DType::BF16;
  require_compute(s.compute);
  const dt cdt = bf16 ? dt::bf16 : dt::f32;

  // Defaults measured with dit-kernel-bench (16 heads x 72, 256/1024/4096 tokens, 2 threads;
  // `--sweep`): bf16 256 x 512 blocks, 5–8% faster than 128 x 256 (a block's fixed cost is half
  // the share); f32 128 x 512, 2% faster than 64 x 512 (128 x 1024 is faster at 1024 tokens
  // but slower at 4096). docs/benchmarks.md, "Attention's blocks".
  m.QB = std::min(s.q_block > 0 ? s.q_block : int64_t(bf16 ? 256 : 128), s.q_len);
  m.KB = std::min(s.kv_block > 0 ? s.kv_block : int64_t(512), s.kv_len);
  m.nqb = (s.q_len + m.QB - 1) / m.QB;
  m.nkb = (s.kv_len + m.KB - 1) / m.KB;
  m.q_tail = s.q_len - (m.nqb - 1) * m.QB;
  m.kv_tail = s.kv_len - (m.nkb - 1) * m.KB;
  if (bf16) {
    m.eq = AttnLayout::bhtd(s.heads, s.q_len, D);
    m.ek = AttnLayout::bhtd(s.heads, s.kv_len, D);
    m.ev = AttnLayout::bhtd(s.heads, s.kv_len, D);
    m.qb = Tensor::empty({s.batch, s.heads, s.q_len, D}, DType::BF16);
    m.kb = Tensor::empty({s.batch, s.heads, s.kv_len, D}, DType::BF16);
    m.vb = Tensor::empty({s.batch, s.heads, s.kv_len, D}, DType::BF16);
  } else {
    m.eq = s.q;
    m.ek = s.k;
    m.ev = s.v;
    // Strided K/V rows (e.g. a fused QKV buffer) put every key in its own page once the rows
    // are several KB apart; at long sequences the TLB misses halve the speed (measured at
    // 4096 tokens, ~10%). Copy them to dense buffers once per run: O(kv·d) next to O(q·kv·d);
    // below 2048 keys the copy costs more than it saves.
    if ((s.k.token_stride != D || s.v.token_stride != D) && s.kv_len >= 2048) {
      m.pack_kv = true;
      m.ek = m.ev = AttnLayout::bhtd(s.heads, s.kv_len, D);
      m.kd = Tensor::empty({s.batch, s.heads, s.kv_len, D});
      m.vd = Tensor::empty({s.batch, s.heads, s.kv_len, D});
    }
  }
  m.nthr = std::max(1, omp_get_max_threads());

  dnnl_call(m.what.c_str(), [&] {
    auto& eng = Engine::get().engine;
    // The block matmuls run inside our OpenMP parallel region, where oneDNN runs single-threaded;
    // create them for one thread so that their work partition matches.
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    struct Restore {
      int n;
      ~Restore() { omp_set_num_threads(n); }
    } restore{saved_threads};
    size_t sp_max = 0;
    for (int qi = 0; qi < 2; ++qi)
      for (int ki = 0; ki < 2; ++ki) {
        const int64_t qr = qi ? m.q_tail : m.QB, kc = ki ? m.kv_tail : m.KB;
        if ((qi && qr == m.QB) || (ki && kc == m.KB)) continue;  // no distinct tail
        BlockPrims& p = m.prims[qi][ki];
        p.qk_src = memory::desc({qr, D}, cdt, memory::dims{m.eq.token_stride, 1});
        p.qk_wei = memory::desc({D, kc}, cdt, memory::dims{1, m.ek.token_stride});
        p.qk_dst = memory::desc({qr, kc}, dt::f32, memory::dims{m.KB, 1});
        p.pv_src = memory::desc({qr, kc}, cdt, memory::dims{m.KB, 1});
        p.pv_wei = memory::desc({kc, D}, cdt, memory::dims{m.ev.token_stride, 1});
        p.pv_dst = memory::desc({qr, D}, dt::f32, memory::dims{D, 1});
        dnnl::primitive_attr qk_attr;
        qk_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        qk_attr.set_output_scales(0, {s.scale});
        dnnl::matmul::primitive_desc qk_pd(dnnl::matmul::desc(p.qk_src, p.qk_wei, p.qk_dst), qk_attr, eng);
        dnnl::primitive_attr pv_attr;
        pv_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        dnnl::matmul::primitive_desc pv_pd(dnnl::matmul::desc(p.pv_src, p.pv_wei, p.pv_dst), pv_attr, eng);
        p.qk = dnnl::matmul(qk_pd);
        p.pv = dnnl::matmul(pv_pd);
        p.qk_sp = qk_pd.scratchpad_desc();
        p.pv_sp = pv_pd.scratchpad_desc();
        sp_max = std::max({sp_max, p.qk_sp.get_size(), p.pv_sp.get_size()});
        if (qi == 0 && ki == 0)
          m.impl_name = std::string("qk: ") + qk_pd.impl_info_str() + ", pv: " + pv_pd.impl_info_str();
      }
    m.scratch_per_thread = (sp_max + 63) / 64 * 64;
    if (m.scratch_per_thread)
      m.scratch_buf = Tensor::empty({int64_t(m.scratch_per_thread / 4) * m.nthr});
    const size_t pf = bf16 ? (size_t(m.QB * m.KB) + 1) / 2 : size_t(m.QB * m.KB);
    auto r16 = [](size_t n) { return (n + 15) / 16 * 16; };  // keep each buffer 64-byte aligned
    m.thread_floats = r16(m.QB * m.KB) + r16(pf) + 2 * r16(m.QB * D) + 3 * r16(m.QB);
    m.thread_buf = Tensor::empty({int64_t(m.thread_floats) * m.nthr});
    m.th.resize(m.nthr);
    for (int t = 0; t < m.nthr; ++t) {
      ThreadState& T = m.th[t];
      T.stream = dnnl::stream(eng);
      float* b = m.thread_buf.f32() + t * m.thread_floats;
      T.S = b;
      b += r16(m.QB * m.KB);
      T.P = b;
      b += r16(pf);
      T.PV = b;
      b += r16(m.QB * D);
      T.O = b;
      b += r16(m.QB * D);
      T.m = b;
      b += r16(m.QB);
      T.l = b;
      b += r16(m.QB);
      T.a = b;
      void* sp = m.scratch_per_thread ? static_cast<char*>(m.scratch_buf.data()) + t * m.scratch_per_thread : nullptr;
      for (int qi = 0; qi < 2; ++qi)
        for (int ki = 0; ki < 2; ++ki) {
          BlockPrims& p = m.prims[qi][ki];
          if (!p.qk) continue;
          auto& A = T.args[qi][ki];
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
        }
    }
  });
}

void Attention::run(const float* q, const float* k, const float* v, float* out, float* lse,
                    const AttnBias* bias) const {
  DIT_CHECK(impl_, "Attention::run on an empty Attention");
  Impl& m = *impl_;
  const AttentionSpec& s = m.spec;
  const int64_t H = s.heads;
  const bool bf16 = s.compute == DType::BF16;
  const void *qbase = q, *kbase = k, *vbase = v;
  const ProfilePhases prof(*this);
  auto t0 = std::chrono::steady_clock::now();
  if (bf16) {
    // Dense bf16 copies of Q, K and V ([batch, heads, tokens, head_dim]), converted once per call.
    attention_to_dense(q, s.q, s.batch, H, s.q_len, s.head_dim, DType::BF16, m.qb.data());
    attention_to_dense(k, s.k, s.batch, H, s.kv_len, s.head_dim, DType::BF16, m.kb.data());
    attention_to_dense(v, s.v, s.batch, H, s.kv_len, s.head_dim, DType::BF16, m.vb.data());
    qbase = m.qb.data();
    kbase = m.kb.data();
    vbase = m.vb.data();
  } else if (m.pack_kv) {
    attention_to_dense(k, s.k, s.batch, H, s.kv_len, s.head_dim, DType::F32, m.kd.data());
    attention_to_dense(v, s.v, s.batch, H, s.kv_len, s.head_dim, DType::F32, m.vd.data());
    kbase = m.kd.data();
    vbase = m.vd.data();
  }
  if (bf16 || m.pack_kv) m.prepare_s += seconds_since(t0);
  m.run_blocks({static_cast<const char*>(qbase), static_cast<const char*>(kbase), static_cast<const char*>(vbase), out,
                false, lse, bias, nullptr});
}

void Attention::run(const uint16_t* q, const uint16_t* k, const uint16_t* v, float* out, float* lse,
                    const AttnBias* bias) const {
  run16(q, k, v, out, false, lse, bias);
}

void Attention::run(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* out, float* lse,
                    const AttnBias* bias) const {
  run16(q, k, v, out, true, lse, bias);
}

void Attention::run16(const uint16_t* q, const uint16_t* k, const uint16_t* v, void* out, bool out16, float* lse,
                      const AttnBias* bias) const {
  DIT_CHECK(impl_, "Attention::run on an empty Attention");
  Impl& m = *impl_;
  const AttentionSpec& s = m.spec;
  DIT_CHECK(s.compute == DType::BF16, m.what << ": bf16 q, k, v need bf16 compute");
  const ProfilePhases prof(*this);
  auto t0 = std::chrono::steady_clock::now();
  // Dense copies [batch, heads, tokens, head_dim], the form run() converts its f32 inputs to.
  attention_to_dense(q, s.q, s.batch, s.heads, s.q_len, s.head_dim, m.qb.bf16());
  attention_to_dense(k, s.k, s.batch, s.heads, s.kv_len, s.head_dim, m.kb.bf16());
  attention_to_dense(v, s.v, s.batch, s.heads, s.kv_len, s.head_dim, m.vb.bf16());
  m.prepare_s += seconds_since(t0);
  m.run_blocks({static_cast<const char*>(m.qb.data()), static_cast<const char*>(m.kb.data()),
                static_cast<const char*>(m.vb.data()), out, out16, lse, bias, nullptr});
}

void Attention::run_dense(const void* q, const void* k, const void* v, float* out, float* lse) const {
  DIT_CHECK(impl_, "Attention::run_dense on an empty Attention");
  DIT_CHECK(impl_->dense, impl_->what << ": run_dense needs dense [batch, heads, tokens, head_dim] k and v (and q for bf16)");
  const ProfilePhases prof(*this);
  impl_->run_blocks({static_cast<const char*>(q), static_cast<const char*>(k), static_cast<const char*>(v), out, false,
                     lse, nullptr, nullptr});
}

void Attention::run_dense_part(const void* q, const void* k, const void* v, float* out,
                               const AttentionCarry& carry) const {
  DIT_CHECK(impl_, "Attention::run_dense_part on an empty Attention");
  DIT_CHECK(impl_->dense,
            impl_->what << ": run_dense_part needs dense [batch, heads, tokens, head_dim] k and v (and q for bf16)");
  DIT_CHECK(carry.m && carry.l, impl_->what << ": run_dense_part needs the rows' m and l");
  const ProfilePhases prof(*this);
  impl_->run_blocks({static_cast<const char*>(q), static_cast<const char*>(k), static_cast<const char*>(v), out, false,
                     nullptr, nullptr, &carry});
}

// The rows of one task (q block) before its first K/V block: afresh, or the state a previous
// call left (m, l and the unnormalised output).
void Attention::Impl::start_rows(ThreadState& T, const BlockRun& r, const TaskRows& t) const {
  const int64_t D = spec.head_dim;
  if (r.carry && !r.carry->first) {
    for (int64_t i = 0; i < t.rows; ++i) {
      T.m[i] = r.carry->m[t.r0 + i];
      T.l[i] = r.carry->l[t.r0 + i];
      std::memcpy(T.O + i * D, static_cast<const float*>(r.out) + t.o0 + i * spec.out.token_stride, sizeof(float) * D);
    }
    return;
  }
  for (int64_t i = 0; i < t.rows; ++i) {
    T.m[i] = kNegInf;
    T.l[i] = 0.f;
  }
}

// The bias of K/V block [k0, k0 + kc) added to the task's scaled logits S.
void Attention::Impl::add_block_bias(ThreadState& T, const AttnBias& bias, const TaskRows& t, int64_t k0,
                                     int64_t kc) const {
  const AttentionSpec& s = spec;
  const int64_t rel_width = s.q_len + s.kv_len - 1;
  const float* kb = bias.key ? bias.key + t.b * s.kv_len + k0 : nullptr;
  for (int64_t i = 0; i < t.rows; ++i) {
    const int64_t q = t.q0 + i;
    const float* hb = bias.head  ? bias.head + (t.h * s.q_len + q) * s.kv_len + k0
                      : bias.rel ? bias.rel + t.h * rel_width + (k0 - q) + (s.q_len - 1)
                                 : nullptr;
    add_bias_row(T.S + i * KB, hb, kb, kc);
  }
}

// The rows of one task after its last K/V block: normalised into out (f32 or bf16) with their
// lse, or, for the next call of run_dense_part, m, l and the output unnormalised.
void Attention::Impl::finish_rows(ThreadState& T, const BlockRun& r, const TaskRows& t) const {
  const int64_t D = spec.head_dim, stride = spec.out.token_stride;
  if (r.carry && !r.carry->last) {
    for (int64_t i = 0; i < t.rows; ++i) {
      r.carry->m[t.r0 + i] = T.m[i];
      r.carry->l[t.r0 + i] = T.l[i];
      std::memcpy(static_cast<float*>(r.out) + t.o0 + i * stride, T.O + i * D, sizeof(float) * D);
    }
    return;
  }
  for (int64_t i = 0; i < t.rows; ++i) {
    const int64_t at = t.o0 + i * stride;
    if (r.out16)
      store_row_bf16(T.O + i * D, 1.f / T.l[i], static_cast<uint16_t*>(r.out) + at, D);
    else
      store_row(T.O + i * D, 1.f / T.l[i], static_cast<float*>(r.out) + at, D);
  }
  if (r.lse)
    for (int64_t i = 0; i < t.rows; ++i) r.lse[t.r0 + i] = T.m[i] + std::log(T.l[i]);
}

// One task: the rows of q block qi of (batch b, head h) over every K/V block, online softmax.
void Attention::Impl::run_task(ThreadState& T, int64_t task, const BlockRun& r) {
  const AttentionSpec& s = spec;
  const int64_t D = s.head_dim, H = s.heads;
  const bool bf16 = s.compute == DType::BF16;
  const size_t esz = bf16 ? 2 : 4;
  TaskRows t;
  t.b = task / (H * nqb);
  t.h = (task / nqb) % H;
  const int64_t qi = task % nqb;
  const int qt = (qi == nqb - 1 && q_tail != QB) ? 1 : 0;
  t.q0 = qi * QB;
  t.rows = qt ? q_tail : QB;
  t.o0 = t.b * s.out.batch_stride + t.h * s.out.head_stride + t.q0 * s.out.token_stride;
  t.r0 = (t.b * H + t.h) * s.q_len + t.q0;
  const char* qp = r.q + (t.b * eq.batch_stride + t.h * eq.head_stride + t.q0 * eq.token_stride) * esz;
  const char* kp = r.k + (t.b * ek.batch_stride + t.h * ek.head_stride) * esz;
  const char* vp = r.v + (t.b * ev.batch_stride + t.h * ev.head_stride) * esz;
  const bool resume = r.carry && !r.carry->first;
  start_rows(T, r, t);
  for (int64_t kj = 0; kj < nkb; ++kj) {
    const int64_t k0 = kj * KB;
    const int kt = (kj == nkb - 1 && kv_tail != KB) ? 1 : 0;
    const int64_t kc = kt ? kv_tail : KB;
    auto& A = T.args[qt][kt];
    const BlockPrims& p = prims[qt][kt];
    A.qk_src.set_data_handle(const_cast<char*>(qp));
    A.qk_wei.set_data_handle(const_cast<char*>(kp + k0 * ek.token_stride * esz));
    auto clock = std::chrono::steady_clock::now();
    execute(p.qk, T.stream, A.qk);  // S = Q·Kᵀ·scale   [rows, kc]
    T.phases.qk += seconds_since(clock);
    if (r.bias) add_block_bias(T, *r.bias, t, k0, kc);
    if (bf16)  // P = exp(S - m'), m' and l updated, a = exp(m - m')
      softmax_block_bf16(T.S, static_cast<uint16_t*>(T.P), t.rows, kc, KB, T.m, T.l, T.a);
    else
      softmax_block(T.S, static_cast<float*>(T.P), t.rows, kc, KB, T.m, T.l, T.a);
    T.phases.softmax += seconds_since(clock);
    A.pv_wei.set_data_handle(const_cast<char*>(vp + k0 * ev.token_stride * esz));
    execute(p.pv, T.stream, A.pv);  // PV = P·V   [rows, D]
    T.phases.pv += seconds_since(clock);
    rescale_add(T.O, T.PV, T.a, t.rows, D, kj == 0 && !resume);  // O = O·a + PV
    T.phases.rescale += seconds_since(clock);
  }
  auto clock = std::chrono::steady_clock::now();
  finish_rows(T, r, t);
  T.phases.store += seconds_since(clock);
}

void Attention::Impl::run_blocks(const BlockRun& run) {
  BlockRun r = run;
  if (r.bias) {
    DIT_CHECK(!(r.bias->head && r.bias->rel), what << ": AttnBias takes head or rel, not both");
    if (!r.bias->key && !r.bias->head && !r.bias->rel) r.bias = nullptr;  // adds nothing
  }
  const int nthr_now = std::min(nthr, std::max(1, omp_get_max_threads()));
  const int64_t tasks = spec.batch * spec.heads * nqb;
  std::string error;
  auto guarded = [&](ThreadState& T, int64_t task) {
    try {
      run_task(T, task, r);
    } catch (const dnnl::error& e) {
#pragma omp critical(dit_attention_error)
      if (error.empty()) error = std::string(e.what()) + " (status " + std::to_string(int(e.status)) + ")";
    } catch (const std::exception& e) {
#pragma omp critical(dit_attention_error)
      if (error.empty()) error = e.what();
    }
  };
  if (nthr_now == 1 || tasks == 1) {  // no parallel region: libgomp allocates a team per 1-thread region
    for (int64_t task = 0; task < tasks; ++task) guarded(th[0], task);
  } else {
#pragma omp parallel num_threads(nthr_now)
    {
      ThreadState& T = th[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < tasks; ++task) guarded(T, task);
    }
  }
  if (!error.empty()) throw Error(what + ": oneDNN: " + error);
}

const AttentionSpec& Attention::spec() const { return impl_->spec; }


AttentionPhases Attention::phases() const {
  AttentionPhases p;
  p.prepare = impl_->prepare_s * impl_->nthr;  // wall time of copies that occupy every thread
  for (const ThreadState& T : impl_->th) {
    p.qk += T.phases.qk;
    p.softmax += T.phases.softmax;
    p.pv += T.phases.pv;
    p.rescale += T.phases.rescale;
    p.store += T.phases.store;
  }
  return p;
}

void Attention::reset_phases() {
  impl_->prepare_s = 0;
  for (ThreadState& T : impl_->th) T.phases = {};
}
const std::string& Attention::impl_info() const { return impl_->impl_name; }
double Attention::flops() const {
  const auto& s = impl_->spec;
  return 4.0 * s.batch * s.heads * s.q_len * s.kv_len * s.head_dim;
}

}  // namespace dit
