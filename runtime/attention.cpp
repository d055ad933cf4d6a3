#include "runtime/attention.h"
#include "runtime/attention_impl.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
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

double seconds_since(std::chrono::steady_clock::time_point& t) {
  const auto now = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(now - t).count();
  t = now;
  return s;
}

// f32: S holds the block's scaled logits Q·Kᵀ·scale.
void softmax_block(const float* S, float* P, int64_t rows, int64_t cols, int64_t ld, float* m, float* l, float* a) {
  for (int64_t i = 0; i < rows; ++i) softmax_row(S + i * ld, P + i * ld, cols, m + i, l + i, a + i);
}

// bf16: S holds Q·Kᵀ, which the softmax scales (softmax_row.h); probabilities computed in f32
// and stored rounded to bf16 for P·V, in one pass.
void softmax_block_bf16(const float* S, uint16_t* P, int64_t rows, int64_t cols, int64_t ld, float scale, float* m,
                        float* l, float* a) {
  for (int64_t i = 0; i < rows; ++i) softmax_row_bf16(S + i * ld, P + i * ld, cols, scale, m + i, l + i, a + i);
}

// s[j] = max(s[j] + (head[j] + key[j])·inv_scale, -FLT_MAX) over one block row of logits:
// inv_scale is 1 where they come scaled (f32), 1/scale where the softmax scales the sum (bf16:
// scale·s + bias); head or key may be null. Where the bias is 0 or the scale 1 (key masks, T5)
// the product is exact, so a zero bias gives the bits of none. The clamp keeps masked logits
// finite (two very negative terms could reach -inf, and a block of -inf logits would make the
// online softmax's exp(m_old - m_new) NaN).
DIT_MULTIVERSION void add_bias_row(float* s, float inv_scale, const float* head, const float* key, int64_t n) {
  constexpr float lo = -std::numeric_limits<float>::max();
  if (head && key) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float v = s[j] + (head[j] + key[j]) * inv_scale;
      s[j] = v < lo ? lo : v;
    }
  } else {
    const float* b = head ? head : key;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      const float v = s[j] + b[j] * inv_scale;
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
    attention_to_dense(q, s.q, s.batch, H, s.q_len, s.head_dim, DType::BF16, m.qb.data(), 0, 0, m.Dqk);
    attention_to_dense(k, s.k, s.batch, H, s.kv_len, s.head_dim, DType::BF16, m.kb.data(), 0, 0, m.Dqk);
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
  attention_to_dense(q, s.q, s.batch, s.heads, s.q_len, s.head_dim, m.qb.bf16(), 0, 0, m.Dqk);
  attention_to_dense(k, s.k, s.batch, s.heads, s.kv_len, s.head_dim, m.kb.bf16(), 0, 0, m.Dqk);
  attention_to_dense(v, s.v, s.batch, s.heads, s.kv_len, s.head_dim, m.vb.bf16());
  m.prepare_s += seconds_since(t0);
  m.run_blocks({static_cast<const char*>(m.qb.data()), static_cast<const char*>(m.kb.data()),
                static_cast<const char*>(m.vb.data()), out, out16, lse, bias, nullptr});
}

// run_dense's and run_dense_part's inputs: dense planes, q and k unpadded (with Dqk > head_dim
// each block is padded in the thread's buffers).
void Attention::Impl::check_dense(const char* fn) const {
  DIT_CHECK(dense, what << ": " << fn << " needs dense [batch, heads, tokens, head_dim] k and v (and q for bf16)");
}

void Attention::run_dense(const void* q, const void* k, const void* v, float* out, float* lse) const {
  DIT_CHECK(impl_, "Attention::run_dense on an empty Attention");
  impl_->check_dense("run_dense");
  const ProfilePhases prof(*this);
  impl_->run_blocks({static_cast<const char*>(q), static_cast<const char*>(k), static_cast<const char*>(v), out, false,
                     lse, nullptr, nullptr, nullptr, impl_->Dqk != impl_->spec.head_dim});
}

void Attention::run_dense_part(const void* q, const void* k, const void* v, float* out,
                               const AttentionCarry& carry) const {
  DIT_CHECK(impl_, "Attention::run_dense_part on an empty Attention");
  impl_->check_dense("run_dense_part");
  DIT_CHECK(carry.m && carry.l, impl_->what << ": run_dense_part needs the rows' m and l");
  const ProfilePhases prof(*this);
  impl_->run_blocks({static_cast<const char*>(q), static_cast<const char*>(k), static_cast<const char*>(v), out, false,
                     nullptr, nullptr, &carry, nullptr, impl_->Dqk != impl_->spec.head_dim});
}

void Attention::run_dense(const void* q, const void* k, const void* v, float* out, AttentionTaskQueue& queue) const {
  DIT_CHECK(impl_, "Attention::run_dense on an empty Attention");
  impl_->check_dense("run_dense");
  const ProfilePhases prof(*this);
  impl_->run_blocks({static_cast<const char*>(q), static_cast<const char*>(k), static_cast<const char*>(v), out, false,
                     nullptr, nullptr, nullptr, &queue, impl_->Dqk != impl_->spec.head_dim});
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
  const int64_t key_stride = bias.key_stride > 0 ? bias.key_stride : s.kv_len;
  const float* kb = bias.key ? bias.key + t.b * key_stride + k0 : nullptr;
  const float inv_scale = 1.f / softmax_scale;
  for (int64_t i = 0; i < t.rows; ++i) {
    const int64_t q = t.q0 + i;
    const float* hb = bias.head  ? bias.head + (t.h * s.q_len + q) * s.kv_len + k0
                      : bias.rel ? bias.rel + t.h * rel_width + (k0 - q) + (s.q_len - 1)
                                 : nullptr;
    add_bias_row(T.S + i * KB, inv_scale, hb, kb, kc);
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
    for (int64_t i = 0; i < t.rows; ++i) r.lse[t.r0 + i] = T.m[i] * softmax_scale + std::log(T.l[i]);
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
  // q and k as Q·Kᵀ reads them: eq and ek, or unpadded planes whose blocks are padded here.
  const AttnLayout lq = r.pad_blocks ? AttnLayout::bhtd(H, s.q_len, D) : eq;
  const AttnLayout lk = r.pad_blocks ? AttnLayout::bhtd(H, s.kv_len, D) : ek;
  const char* qp = r.q + (t.b * lq.batch_stride + t.h * lq.head_stride + t.q0 * lq.token_stride) * esz;
  const char* kp = r.k + (t.b * lk.batch_stride + t.h * lk.head_stride) * esz;
  const char* vp = r.v + (t.b * ev.batch_stride + t.h * ev.head_stride) * esz;
  const bool resume = r.carry && !r.carry->first;
  if (r.pad_blocks) {  // the task's q rows, once
    auto clock = std::chrono::steady_clock::now();
    attention_detail::copy_rows_bf16(reinterpret_cast<const uint16_t*>(qp), D, T.qpad, Dqk, t.rows, D);
    qp = reinterpret_cast<const char*>(T.qpad);
    T.phases.qk += seconds_since(clock);
  }
  start_rows(T, r, t);
  for (int64_t kj = 0; kj < nkb; ++kj) {
    const int64_t k0 = kj * KB;
    const int kt = (kj == nkb - 1 && kv_tail != KB) ? 1 : 0;
    const int64_t kc = kt ? kv_tail : KB;
    auto& A = T.args[qt][kt];
    const BlockPrims& p = prims[qt][kt];
    auto clock = std::chrono::steady_clock::now();
    const char* kblock = kp + k0 * lk.token_stride * esz;
    if (r.pad_blocks) {  // [kc, D] -> the first D of [kc, Dqk]
      attention_detail::copy_rows_bf16(reinterpret_cast<const uint16_t*>(kblock), D, T.kpad, Dqk, kc, D);
      kblock = reinterpret_cast<const char*>(T.kpad);
    }
    A.qk_src.set_data_handle(const_cast<char*>(qp));
    A.qk_wei.set_data_handle(const_cast<char*>(kblock));
    execute(p.qk, T.stream, A.qk);  // S = Q·Kᵀ·qk_scale   [rows, kc]
    T.phases.qk += seconds_since(clock);
    if (r.bias) add_block_bias(T, *r.bias, t, k0, kc);  // S += bias / softmax_scale
    if (bf16)  // P = exp((S - m')·scale), m' and l updated, a = exp((m - m')·scale)
      softmax_block_bf16(T.S, static_cast<uint16_t*>(T.P), t.rows, kc, KB, softmax_scale, T.m, T.l, T.a);
    else  // P = exp(S - m'), S scaled
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
    DIT_CHECK(r.bias->key_stride == 0 || r.bias->key_stride >= spec.kv_len,
              what << ": AttnBias::key_stride " << r.bias->key_stride << " is shorter than kv_len");
    if (!r.bias->key && !r.bias->head && !r.bias->rel) r.bias = nullptr;  // adds nothing
  }
  const int nthr_now = std::min(nthr, std::max(1, omp_get_max_threads()));
  const int64_t tasks = spec.batch * spec.heads * nqb;
  std::string error;
  auto guarded = [&](ThreadState& T, int64_t task) {
    try {
      run_task(T, task, r);
      return true;
    } catch (const dnnl::error& e) {
#pragma omp critical(dit_attention_error)
      if (error.empty()) error = std::string(e.what()) + " (status " + std::to_string(int(e.status)) + ")";
    } catch (const std::exception& e) {
#pragma omp critical(dit_attention_error)
      if (error.empty()) error = e.what();
    }
    return false;
  };
  // Claimed tasks: each thread takes the next until the queue has none (a task that failed is
  // not reported finished).
  int64_t bad_task = -1;
  auto claimed = [&](ThreadState& T) {
    for (int64_t task = r.queue->claim(); task >= 0; task = r.queue->claim()) {
      if (task >= tasks) {
#pragma omp critical(dit_attention_error)
        bad_task = task;
        return;
      }
      if (guarded(T, task)) r.queue->finished(task);
    }
  };
  if (r.queue && nthr_now == 1) {
    claimed(th[0]);
  } else if (r.queue) {
#pragma omp parallel num_threads(nthr_now)
    claimed(th[omp_get_thread_num()]);
  } else if (nthr_now == 1 || tasks == 1) {  // no parallel region: libgomp allocates a team per 1-thread region
    for (int64_t task = 0; task < tasks; ++task) guarded(th[0], task);
  } else {
#pragma omp parallel num_threads(nthr_now)
    {
      ThreadState& T = th[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < tasks; ++task) guarded(T, task);
    }
  }
  DIT_CHECK(bad_task < 0, what << ": a task queue handed out task " << bad_task << " of " << tasks);
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
int64_t Attention::qk_head_dim() const { return impl_->Dqk; }
int64_t Attention::tasks() const { return impl_->spec.batch * impl_->spec.heads * impl_->nqb; }
double Attention::flops() const {
  const auto& s = impl_->spec;
  return 4.0 * s.batch * s.heads * s.q_len * s.kv_len * s.head_dim;
}

}  // namespace dit
