// Scaled dot-product attention softmax(Q·Kᵀ·scale)·V, computed in blocks with an online
// softmax (flash-attention style): no [q_len × kv_len] matrix is ever materialised. It
// returns the output and, if asked, the per-row log-sum-exp of the scaled logits; keys that
// come in several sets (ring attention) carry the rows' online softmax from one set to the
// next (run_dense_part):
//
//   AttentionSpec spec;
//   spec.batch = 2;  spec.heads = 16;  spec.q_len = spec.kv_len = 256;  spec.head_dim = 72;
//   Attention attn(spec);
//   attn.run(q, k, v, out, lse);            // layouts below; lse may be null
//
// Layout of q, k, v and out: element (b, h, t, i) at b*batch_stride + h*head_stride +
// t*token_stride + i (i < head_dim contiguous), so the fused QKV projection output
// [b, t, 3, h, d] can be read in place. lse is [batch, heads, q_len] contiguous.
//
// An optional additive bias (AttnBias) is added, in f32, to the scaled logits before the
// softmax: a per-key term (a padding mask such as (1-m)·finfo.min or (1-m)·(-10000)) and/or
// a per-head term shared by the batch, either a full [heads, q_len, kv_len] array or, when it
// depends only on j - i (T5's relative position bias), its diagonals [heads, q_len + kv_len - 1]:
//   p = softmax(Q·Kᵀ·scale + (head[h, i, j] + key[b, j]))
//   rel form: head[h, i, j] = rel[h, (j - i) + q_len - 1]
// The scale is applied by the softmax, as it reads the logits (softmax_row.h), not by the
// Q·Kᵀ matmul; so the bias is added as bias/scale to the unscaled logits (exact where the
// bias is 0 or the scale 1: masks, T5). Sums below -FLT_MAX are clamped to -FLT_MAX, so
// masked keys stay finite: a K/V block whose keys are all masked produces no NaN and weighs
// exactly 0 once a row has seen an unmasked key (exp underflows to 0). A row whose keys are
// all masked averages V (as torch does).
#pragma once

#include <array>
#include <memory>
#include <string>

#include "runtime/tensor.h"

namespace dit {

struct AttnLayout {
  int64_t batch_stride = 0, head_stride = 0, token_stride = 0;
  // Dense [batch, heads, tokens, head_dim].
  static AttnLayout bhtd(int64_t heads, int64_t tokens, int64_t head_dim) {
    return {heads * tokens * head_dim, tokens * head_dim, head_dim};
  }
  // Dense [batch, tokens, heads, head_dim] with `row` elements per token (e.g. 3·H·d in a QKV buffer).
  static AttnLayout bthd(int64_t tokens, int64_t head_dim, int64_t heads, int64_t row) {
    return {tokens * row, head_dim, row};
  }
};

struct AttnBias {
  const float* key = nullptr;   // [batch, kv_len], e.g. a padding mask
  int64_t key_stride = 0;       // elements between two batch items' key rows (0: kv_len; more: the
                                // first kv_len of longer rows, e.g. a mask whose tail is not attended)
  const float* head = nullptr;  // [heads, q_len, kv_len], shared by the batch
  const float* rel = nullptr;   // [heads, q_len + kv_len - 1]: a head term that depends on j - i only
                                // (O(L) memory instead of O(L²)); not together with head
};

// Whether bf16 attention pads Q and K for Q·Kᵀ (AttentionSpec::bf16_qk_pad).
enum class QkPad { Auto, Off, On };
// Auto's answer, the same for every attention of the process: where oneDNN computes bf16 with
// AMX, yes (bf16 attention 11% faster on the 16-core AMX machine; 9–13% slower on AVX512_BF16
// without AMX: docs/benchmarks.md, "bf16 attention with Q and K padded for AMX"), unless the
// environment's DIT_BF16_QK_PAD says on, off or auto (anything else: an error naming it).
// Ranks of one machine agree, so a parallel layout pads as the single process does.
bool qk_pad_by_default();
QkPad parse_qk_pad(const std::string& what, const std::string& value);  // on, off, auto

struct AttentionSpec {
  int64_t batch = 1, heads = 1, q_len = 1, kv_len = 1, head_dim = 1;
  float scale = 0;  // 0 -> 1/sqrt(head_dim); any other (> 0, finite) as given (T5: 1.0)
  AttnLayout q, k, v, out;  // all-zero -> dense bhtd
  DType compute = DType::F32;
  int64_t q_block = 0, kv_block = 0;  // rows of Q / K,V per block; 0 -> defaults (tuned here)
  // bf16: scale the logits in the Q·Kᵀ matmul (an output scale) rather than in the softmax, as
  // bf16 ran before the thirteenth session; only for comparing the two
  // (dit-kernel-bench --bf16-scale-in-qk). f32 always scales there.
  bool bf16_scale_in_qk = false;
  // bf16: Q·Kᵀ reduces over head_dim zero-padded to a multiple of 32 (AMX's tile depth in bf16:
  // 72 -> 96, whole tiles); P·V and the output keep head_dim. The logits are the same sums (the
  // pad adds exact zeros; only the order of the f32 additions may differ). Auto pads where
  // qk_pad_by_default() says (AMX). run() copies q and k into padded planes; run_dense and
  // run_dense_part read unpadded planes and copy each block into the thread's padded buffers:
  // the same matmul over the same values, so the bits of run(). f32 never pads (On is refused).
  QkPad bf16_qk_pad = QkPad::Auto;
};

// Where a run's time went, summed over the threads (seconds), since construction or the last
// reset_phases(): the block matmuls Q·Kᵀ (with run_dense's copies of its blocks into padded
// rows, bf16_qk_pad) and P·V, the online softmax (with any bias), the running output's rescale,
// the final normalisation and store, and the copies before the blocks (their wall time times
// the threads, as they run on all).
struct AttentionPhases {
  double qk = 0, softmax = 0, pv = 0, rescale = 0, store = 0, prepare = 0;
  double total() const { return qk + softmax + pv + rescale + store + prepare; }
  // In the order of profile::kAttentionPhaseNames (runtime/profile.h).
  std::array<double, 6> values() const { return {qk, softmax, pv, rescale, store, prepare}; }
};

// The online softmax's state between calls of Attention::run_dense_part over successive sets of
// keys (ring attention): per query row ([batch, heads, q_len]) the running max m of the logits
// before the scale (softmax_row.h) and the running sum l of the scaled logits' exponentials;
// the unnormalised output stays in out.
struct AttentionCarry {
  float* m = nullptr;
  float* l = nullptr;
  bool first = true;  // start afresh (m and l are written, not read)
  bool last = true;   // normalise out (m and l are then left as they were)
};

// A run's tasks claimed one at a time (Attention::run_dense with a queue), so that several
// callers, e.g. processes that share q, k, v and the output in shared memory, split one run's
// tasks between them as they go: whoever is free takes the next. A task is the rows of one
// query block of one (batch, head); Attention::tasks() of them. Each task's output rows are the
// same whoever computes it (the same kernels on the same inputs).
class AttentionTaskQueue {
 public:
  virtual ~AttentionTaskQueue() = default;
  virtual int64_t claim() noexcept = 0;              // the next task to compute, or -1: none left
  virtual void finished(int64_t task) noexcept = 0;  // its output rows are written
};
class Attention {
 public:
  Attention();
  explicit Attention(const AttentionSpec& spec);  // creates primitives and scratch once
  Attention(Attention&&) noexcept;
  Attention& operator=(Attention&&) noexcept;
  ~Attention();
  // lse may be null when not needed; bias null (or both its pointers null) adds nothing.
  void run(const float* q, const float* k, const float* v, float* out, float* lse,
           const AttnBias* bias = nullptr) const;
  // The same with q, k and v already in bf16 (bf16 compute only; the spec's layouts): e.g. a
  // QKV projection that wrote bf16. The bits of run() on their values as floats: run() rounds
  // its inputs to bf16 first, so a projection rounding its output gives the same result.
  void run(const uint16_t* q, const uint16_t* k, const uint16_t* v, float* out, float* lse,
           const AttnBias* bias = nullptr) const;
  // The same writing out in bf16 (the spec's out layout, in bf16 elements): run()'s f32 output
  // rounded to nearest even, for a bf16 matmul that would round it so anyway (the output
  // projection), without the f32 rows written, read back and converted.
  void run(const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* out, float* lse,
           const AttnBias* bias = nullptr) const;
  // Inputs already in the form the block matmuls read, as attention_to_dense writes them: k
  // and v dense [batch, heads, kv_len, head_dim] in the compute type (bf16 as uint16_t); q the
  // same for bf16, and floats in the spec's q layout for f32 (read in place, as run() does).
  // Nothing is converted or copied per call: ring attention converts its queries once for all
  // K/V blocks, and each block once, by its owner. The spec's k and v layouts (and q's for
  // bf16) must be AttnLayout::bhtd. bf16: the bits of run() on the same values (run() converts
  // to this very form); f32: run()'s result up to rounding (other strides, another kernel).
  void run_dense(const void* q, const void* k, const void* v, float* out, float* lse) const;
  // run_dense over one set of keys of several, continuing the rows' online softmax from the
  // previous call (carry.first false: from carry's m, l and the unnormalised out) and leaving it
  // for the next (carry.last false; true: out normalised, as run_dense). The same operations as
  // one run over all the keys, block for block: the same bits when every set before the last
  // is a whole number of kv blocks. The sets may differ in length (Attention objects of other
  // kv_len, the same q_len, layouts and block sizes).
  void run_dense_part(const void* q, const void* k, const void* v, float* out, const AttentionCarry& carry) const;
  // run_dense over the tasks `queue` hands out (claimed by this call's threads until it says
  // none is left): each task's rows of out are run_dense's, bit for bit.
  void run_dense(const void* q, const void* k, const void* v, float* out, AttentionTaskQueue& queue) const;
  int64_t tasks() const;  // batch · heads · query blocks
  const AttentionSpec& spec() const;
  AttentionPhases phases() const;
  void reset_phases();
  double flops() const;  // 4·batch·heads·q_len·kv_len·head_dim
  int64_t qk_head_dim() const;  // what Q·Kᵀ reduces over: head_dim, or padded (bf16_qk_pad)
  const std::string& impl_info() const;  // oneDNN implementation of the block matmuls

 private:
  void run16(const uint16_t* q, const uint16_t* k, const uint16_t* v, void* out, bool out16, float* lse,
             const AttnBias* bias) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// x (`tokens` tokens of `heads` heads in layout L) as dense [batch, heads, tokens, head_dim]
// in `compute` (f32: floats copied; bf16: rounded to bf16, uint16_t): what run_dense reads.
// dst holds batch·heads·tokens·head_dim elements; the rows are split over the threads. With
// dst_tokens > 0 the destination is [batch, heads, dst_tokens, head_dim] and x lands at token
// dst_first of it (one rank's share of a longer sequence). With dst_row > 0 the destination's
// rows are dst_row >= head_dim elements long, of which the first head_dim are written (a
// zero-padded head_dim, AttentionSpec::bf16_qk_pad).
void attention_to_dense(const float* x, const AttnLayout& L, int64_t batch, int64_t heads, int64_t tokens,
                        int64_t head_dim, DType compute, void* dst, int64_t dst_tokens = 0, int64_t dst_first = 0,
                        int64_t dst_row = 0);
// The same from bf16 x into the bf16 form (a copy of the rows).
void attention_to_dense(const uint16_t* x, const AttnLayout& L, int64_t batch, int64_t heads, int64_t tokens,
                        int64_t head_dim, uint16_t* dst, int64_t dst_tokens = 0, int64_t dst_first = 0,
                        int64_t dst_row = 0);

}  // namespace dit
