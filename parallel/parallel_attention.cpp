// make_sequence_parallel_attention (parallel/parallel_attention.h): prepare() sizes the
// kernels and buffers for a shape, forward() dispatches to Ulysses (ulysses_exchange.cpp),
// the ring (ring_attention.cpp) or local attention. The class: sequence_parallel_attention.h.
#include <algorithm>

#include "parallel/sequence_parallel_attention.h"

namespace dit {
namespace detail {

void SequenceParallelAttention::use_groups(bool whole) {
  whole_group_ = whole;
  uly_ = whole ? sp_ : asked_.ulysses;
  ring_ = whole ? nullptr : asked_.ring;
  U_ = uly_ ? uly_->size() : 1;
  R_ = ring_ ? ring_->size() : 1;
  u_ = uly_ ? uly_->rank() : 0;
  r_ = ring_ ? ring_->rank() : 0;
}

// With a ring and the sp group given, first as Ulysses over the whole group through its
// windows (parallel_attention.h); where the group has none (not one machine: ensure_window
// refuses on every rank alike), the layout as asked.
void SequenceParallelAttention::prepare(const SelfAttentionShape& s) {
  prepared_ = false;
  if (sp_ && Asked::degree(asked_.ring) > 1 && s.heads >= sp_->size()) {
    use_groups(true);
    prepare_groups(s);
    if (uly_window_) return;
    free_exchange_buffers();
  }
  use_groups(false);
  prepare_groups(s);
}

void SequenceParallelAttention::prepare_groups(const SelfAttentionShape& s) {
  B_ = s.batch;
  H_ = s.heads;
  d_ = s.head_dim;
  T_ = s.local_tokens;
  const int64_t N = s.total_tokens > 0 ? s.total_tokens : s.local_tokens;
  DIT_CHECK(B_ > 0 && H_ > 0 && d_ > 0 && N > 0, "sequence-parallel attention: empty shape");
  DIT_CHECK(H_ >= U_, "ulysses: " << H_ << " attention heads cannot be split over " << U_
                                   << " ranks (the Ulysses degree may be at most the head count; use --ring for more)");
  // Heads split like tokens: contiguous, sizes differing by at most one (6 heads over 4
  // ranks: 2, 2, 1, 1). Exact either way; uneven splits only cost balance.
  head_ranges_ = split_all(H_, U_);
  Hu_ = heads_of(u_).size();
  ranges_ = split_all(N, U_ * R_);
  const TokenRange mine = ranges_[size_t(r_ * U_ + u_)];
  DIT_CHECK(mine.size() == T_, "sequence-parallel attention: this rank holds " << T_ << " tokens, expected "
                                                                               << mine.size() << " of " << N);
  Tg_ = group_tokens(r_);
  Tmax_ = 0;
  for (int rr = 0; rr < R_; ++rr) Tmax_ = std::max(Tmax_, group_tokens(rr));

  compute_ = s.compute;
  esz_ = compute_ == DType::BF16 ? 2 : 4;
  uly16_ = false;  // prepare_ulysses_blocks decides
  // Chunks pipeline Ulysses only without a ring (USP runs the ring over all of its heads at once).
  C_ = U_ > 1 && R_ == 1 && !whole_group_ ? int(std::min<int64_t>(chunks_wanted_, heads_of(0).size())) : 1;
  if (U_ > 1) prepare_ulysses();

  AttentionSpec a;
  a.batch = B_;
  a.heads = Hu_;
  a.head_dim = d_;
  a.compute = s.compute;
  // Q (and K, V without a ring) read in place from [B, Tg, 3, Hu, d] (U > 1) or the
  // caller's [B, T, 3, H, d] (U == 1, where Hu == H and Tg == T).
  a.q = AttnLayout::bthd(Tg_, d_, Hu_, 3 * Hu_ * d_);
  by_kv_len_.clear();
  by_heads_.clear();
  if (R_ == 1) {
    // One object per heads-per-call: Hu (no chunks) or the chunk sizes, [B, Tg, 3, hc, d] in
    // place or dense planes (bf16 exchange); through windows every rank's head count (any rank
    // computes any rank's tasks), from dense planes.
    std::vector<int64_t> counts;
    for (int c = 0; c < C_; ++c) counts.push_back(U_ > 1 ? chunk_heads(c, u_).size() : Hu_);
    if (uly_window_)
      for (int j = 0; j < U_; ++j) counts.push_back(heads_of(j).size());
    const bool planes = uly16_ || uly_window_;
    for (const int64_t hc : counts) {
      if (Tg_ == 0 || hc == 0 || by_heads_.count(hc)) continue;
      a.heads = hc;
      a.q_len = a.kv_len = Tg_;
      a.q = a.k = a.v = planes ? AttnLayout::bhtd(hc, Tg_, d_) : AttnLayout::bthd(Tg_, d_, hc, 3 * hc * d_);
      a.out = AttnLayout::bthd(Tg_, d_, hc, hc * d_);
      by_heads_.emplace(hc, Attention(a));
    }
  } else {
    // K and V dense [B, Hu, tokens, d] in the compute type (run_dense_part), and Q too in bf16
    // (f32 reads it in place from [B, Tg, 3, Hu, d]); the output [B, Tg, Hu, d] as the
    // caller's, unnormalised between the blocks, with the rows' running max and sum in
    // m_acc_ and l_acc_ [B, Hu, Tg].
    for (int rr = 0; rr < R_; ++rr) {
      const int64_t tj = group_tokens(rr);
      if (Tg_ == 0 || tj == 0 || by_kv_len_.count(tj)) continue;
      a.q_len = Tg_;
      a.kv_len = tj;
      a.q = compute_ == DType::BF16 ? AttnLayout::bhtd(Hu_, Tg_, d_) : AttnLayout::bthd(Tg_, d_, Hu_, 3 * Hu_ * d_);
      a.k = a.v = AttnLayout::bhtd(Hu_, tj, d_);
      a.out = AttnLayout::bthd(Tg_, d_, Hu_, Hu_ * d_);
      by_kv_len_.emplace(tj, Attention(a));
    }
    // (bf16 queries from rows; USP in bf16 reads them from Ulysses' planes)
    q_dense_.assign(compute_ == DType::BF16 && !uly16_ ? size_t(B_ * Hu_ * Tg_ * d_) * esz_ + 1 : 0, 0);
    const size_t block_bytes = size_t(2 * B_ * Tmax_ * Hu_ * d_) * esz_;  // the largest block
    const size_t kv_elems = block_bytes / sizeof(float) + 1;
    window_ = ring_->ensure_window(kv_elems * sizeof(float));  // collective: every ring rank prepares
    for (Buf& b : kv_) {
      if (window_) {
        Buf().swap(b);
      } else {
        b.assign(kv_elems, 0.0f);
      }
    }
    m_acc_.assign(size_t(B_ * Hu_ * Tg_) + 1, 0.0f);
    l_acc_.assign(m_acc_.size(), 0.0f);
    last_step_ = 0;  // the last ring step whose block has tokens: it normalises the output
    for (int st = 0; st < R_; ++st)
      if (group_tokens((r_ - st + R_) % R_) > 0) last_step_ = st;
  }
  prepared_ = true;
}

// Attention of the group's tokens over `heads` heads: [B, Tg, 3, heads, d] -> [B, Tg, heads, d]
// (bf16 rows only with U == 1, where qkv_g is the caller's).
void SequenceParallelAttention::attend(QkvRows qkv_g, float* out_g, int64_t heads) {
  if (R_ > 1) return ring_attention(qkv_g, out_g);  // even with no tokens: this rank passes K/V on
  if (Tg_ == 0 || heads == 0) return;
  const int64_t hd = heads * d_;
  const Attention& a = by_heads_.at(heads);
  if (qkv_g.bf16) {
    const uint16_t* x = qkv_g.b16();
    return a.run(x, x + hd, x + 2 * hd, out_g, nullptr);
  }
  const float* x = qkv_g.f32();
  a.run(x, x + hd, x + 2 * hd, out_g, nullptr);
}

void SequenceParallelAttention::to_dense(QkvRows qkv, int64_t offset, const AttnLayout& L, int64_t heads,
                                         int64_t tokens, void* dst, int64_t dst_tokens, int64_t first) const {
  if (qkv.bf16)
    attention_to_dense(qkv.b16() + offset, L, B_, heads, tokens, d_, static_cast<uint16_t*>(dst), dst_tokens, first);
  else
    attention_to_dense(qkv.f32() + offset, L, B_, heads, tokens, d_, compute_, dst, dst_tokens, first);
}

DType SequenceParallelAttention::qkv_dtype() const {
  return prepared_ && compute_ == DType::BF16 && (U_ == 1 || uly16_) ? DType::BF16 : DType::F32;
}

void SequenceParallelAttention::forward(const float* qkv, float* out) {
  DIT_CHECK(prepared_, "sequence-parallel attention: forward before prepare()");
  const QkvRows rows{qkv, false};
  if (U_ > 1) return ulysses_forward(rows, OutRows{out, false});
  attend(rows, out, Hu_);  // U == 1: the group is this rank, [B, T, 3, H, d] read in place
}

void SequenceParallelAttention::forward(const uint16_t* qkv, float* out) {
  DIT_CHECK(prepared_, "sequence-parallel attention: forward before prepare()");
  DIT_CHECK(qkv_dtype() == DType::BF16, name() << " attention: forward with bf16 q, k, v, but it takes "
                                               << dtype_name(qkv_dtype()) << " (its exchange is f32)");
  const QkvRows rows{qkv, true};
  if (U_ > 1) return ulysses_forward(rows, OutRows{out, false});
  attend(rows, out, Hu_);
}

DType SequenceParallelAttention::out_dtype() const {
  return prepared_ && U_ > 1 && uly16_ ? DType::BF16 : DType::F32;
}

void SequenceParallelAttention::forward(const uint16_t* qkv, uint16_t* out) {
  DIT_CHECK(prepared_, "sequence-parallel attention: forward before prepare()");
  DIT_CHECK(out_dtype() == DType::BF16, name() << " attention: forward into bf16 output, but it writes f32 (bf16 "
                                                  "output: Ulysses exchanging bf16)");
  ulysses_forward(QkvRows{qkv, true}, OutRows{out, true});
}

}  // namespace detail

std::unique_ptr<SelfAttention> make_sequence_parallel_attention(std::shared_ptr<ProcessGroup> ulysses,
                                                                std::shared_ptr<ProcessGroup> ring, int ulysses_chunks,
                                                                std::shared_ptr<ProcessGroup> sp) {
  return std::make_unique<detail::SequenceParallelAttention>(std::move(ulysses), std::move(ring), ulysses_chunks,
                                                             std::move(sp));
}

}  // namespace dit
