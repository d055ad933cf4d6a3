#include "parallel/parallel_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "runtime/token_split.h"
#include "runtime/attention.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

using Buf = std::vector<float>;

// Bytes of an all-to-all this rank sends to other ranks (the block to itself stays local).
uint64_t bytes_to_others(const std::vector<size_t>& counts, int me) {
  uint64_t n = 0;
  for (size_t j = 0; j < counts.size(); ++j)
    if (int(j) != me) n += counts[j] * 4;
  return n;
}

class SequenceParallelAttention final : public SelfAttention {
 public:
  SequenceParallelAttention(std::shared_ptr<ProcessGroup> ulysses, std::shared_ptr<ProcessGroup> ring)
      : uly_(std::move(ulysses)), ring_(std::move(ring)) {
    U_ = uly_ ? uly_->size() : 1;
    R_ = ring_ ? ring_->size() : 1;
    u_ = uly_ ? uly_->rank() : 0;
    r_ = ring_ ? ring_->rank() : 0;
  }

  const char* name() const override { return U_ > 1 && R_ > 1 ? "usp" : U_ > 1 ? "ulysses" : R_ > 1 ? "ring" : "local"; }

  void prepare(const SelfAttentionShape& s) override;
  void forward(const float* qkv, float* out) override;

 private:
  int64_t group_tokens(int ring_rank) const {  // tokens of the Ulysses group at ring position ring_rank
    return ranges_[size_t(ring_rank * U_ + U_ - 1)].end - ranges_[size_t(ring_rank * U_)].begin;
  }
  TokenRange heads_of(int j) const { return head_ranges_[size_t(j)]; }  // Ulysses rank j's heads
  void ulysses_scatter_heads(const float* qkv);   // token split -> head split (qkv_g_)
  void ulysses_gather_heads(float* out);          // head split -> token split
  void ring_attention(const float* qkv_g, float* out_g);
  void pack_kv(const float* qkv_g, float* kv) const;

  std::shared_ptr<ProcessGroup> uly_, ring_;
  int U_ = 1, R_ = 1, u_ = 0, r_ = 0;
  int64_t B_ = 0, H_ = 0, Hu_ = 0, d_ = 0, T_ = 0, Tg_ = 0, Tmax_ = 0;
  std::vector<TokenRange> ranges_;       // tokens of sequence-parallel rank s
  std::vector<TokenRange> head_ranges_;  // heads of Ulysses rank j (uneven when U does not divide H)
  bool prepared_ = false;

  // Ulysses.
  Buf send_, recv_, qkv_g_, out_g_;
  std::vector<size_t> qkv_send_counts_, qkv_recv_counts_, out_send_counts_, out_recv_counts_;
  // Attention over the group's tokens (no ring), or per K/V block length (ring).
  Attention local_;
  std::map<int64_t, Attention> by_kv_len_;
  // Ring.
  Buf kv_[2], acc_, lse_acc_, part_, lse_part_;
  uint32_t tag_ = 1;
};

void SequenceParallelAttention::prepare(const SelfAttentionShape& s) {
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

  if (U_ > 1) {
    // qkv all-to-all: to Ulysses rank j my tokens' q,k,v of heads block j; from j its tokens' of mine.
    qkv_send_counts_.clear();
    out_recv_counts_.clear();
    qkv_recv_counts_.clear();
    out_send_counts_.clear();
    for (int j = 0; j < U_; ++j) {
      const int64_t hj = heads_of(j).size(), tj = ranges_[size_t(r_ * U_ + j)].size();
      qkv_send_counts_.push_back(size_t(B_ * T_ * 3 * hj * d_));
      out_recv_counts_.push_back(size_t(B_ * T_ * hj * d_));
      qkv_recv_counts_.push_back(size_t(B_ * tj * 3 * Hu_ * d_));
      out_send_counts_.push_back(size_t(B_ * tj * Hu_ * d_));
    }
    send_.assign(size_t(std::max(B_ * T_ * 3 * H_ * d_, B_ * Tg_ * Hu_ * d_)) + 1, 0.0f);
    recv_.assign(size_t(std::max(B_ * Tg_ * 3 * Hu_ * d_, B_ * T_ * H_ * d_)) + 1, 0.0f);
    qkv_g_.assign(size_t(B_ * Tg_ * 3 * Hu_ * d_) + 1, 0.0f);
  }
  out_g_.assign(size_t(B_ * Tg_ * Hu_ * d_) + 1, 0.0f);

  AttentionSpec a;
  a.batch = B_;
  a.heads = Hu_;
  a.head_dim = d_;
  a.compute = s.compute;
  // Q (and K, V without a ring) read in place from [B, Tg, 3, Hu, d] (U > 1) or the
  // caller's [B, T, 3, H, d] (U == 1, where Hu == H and Tg == T).
  a.q = AttnLayout::bthd(Tg_, d_, Hu_, 3 * Hu_ * d_);
  by_kv_len_.clear();
  if (R_ == 1) {
    if (Tg_ > 0) {
      a.q_len = a.kv_len = Tg_;
      a.k = a.v = a.q;
      a.out = AttnLayout::bthd(Tg_, d_, Hu_, Hu_ * d_);
      local_ = Attention(a);
    }
  } else {
    // K/V blocks are [B, Tj, 2, Hu, d]; partial outputs [B, Hu, Tg, d] (rows match the lse layout).
    for (int rr = 0; rr < R_; ++rr) {
      const int64_t tj = group_tokens(rr);
      if (Tg_ == 0 || tj == 0 || by_kv_len_.count(tj)) continue;
      a.q_len = Tg_;
      a.kv_len = tj;
      a.k = a.v = AttnLayout::bthd(tj, d_, Hu_, 2 * Hu_ * d_);
      a.out = AttnLayout::bhtd(Hu_, Tg_, d_);
      by_kv_len_.emplace(tj, Attention(a));
    }
    const size_t kv_elems = size_t(B_ * Tmax_ * 2 * Hu_ * d_) + 1;
    kv_[0].assign(kv_elems, 0.0f);
    kv_[1].assign(kv_elems, 0.0f);
    acc_.assign(size_t(B_ * Hu_ * Tg_ * d_) + 1, 0.0f);
    part_.assign(acc_.size(), 0.0f);
    lse_acc_.assign(size_t(B_ * Hu_ * Tg_) + 1, 0.0f);
    lse_part_.assign(lse_acc_.size(), 0.0f);
  }
  prepared_ = true;
}

// [B, T, 3, H, d] (this rank's tokens, all heads) -> qkv_g_ [B, Tg, 3, Hu, d] (the group's tokens, my heads).
void SequenceParallelAttention::ulysses_scatter_heads(const float* qkv) {
  const int64_t hd = Hu_ * d_;
  float* p = send_.data();
  for (int j = 0; j < U_; ++j) {  // block j: [B, T, 3, Hj, d] of rank j's heads
    const int64_t h0 = heads_of(j).begin * d_, hjd = heads_of(j).size() * d_;
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t t = 0; t < T_; ++t)
        for (int c = 0; c < 3; ++c) {
          std::memcpy(p, qkv + ((b * T_ + t) * 3 + c) * H_ * d_ + h0, size_t(hjd) * 4);
          p += hjd;
        }
  }
  {
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(bytes_to_others(qkv_send_counts_, u_));
    uly_->all_to_all_v(send_.data(), qkv_send_counts_, recv_.data(), qkv_recv_counts_);
  }
  const float* q = recv_.data();
  int64_t t0 = 0;
  for (int j = 0; j < U_; ++j) {  // from rank j: [B, Tj, 3, Hu, d]
    const int64_t tj = ranges_[size_t(r_ * U_ + j)].size();
    for (int64_t b = 0; b < B_; ++b) {
      const size_t n = size_t(tj * 3 * hd);
      std::memcpy(qkv_g_.data() + (b * Tg_ + t0) * 3 * hd, q, n * 4);
      q += n;
    }
    t0 += tj;
  }
}

// out_g_ [B, Tg, Hu, d] -> out [B, T, H, d].
void SequenceParallelAttention::ulysses_gather_heads(float* out) {
  const int64_t hd = Hu_ * d_;
  float* p = send_.data();
  int64_t t0 = 0;
  for (int j = 0; j < U_; ++j) {  // to rank j: its tokens' outputs of my heads, [B, Tj, Hu, d]
    const int64_t tj = ranges_[size_t(r_ * U_ + j)].size();
    for (int64_t b = 0; b < B_; ++b) {
      const size_t n = size_t(tj * hd);
      std::memcpy(p, out_g_.data() + (b * Tg_ + t0) * hd, n * 4);
      p += n;
    }
    t0 += tj;
  }
  {
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(bytes_to_others(out_send_counts_, u_));
    uly_->all_to_all_v(send_.data(), out_send_counts_, recv_.data(), out_recv_counts_);
  }
  const float* q = recv_.data();
  for (int j = 0; j < U_; ++j) {  // from rank j: [B, T, Hj, d] of its heads
    const int64_t h0 = heads_of(j).begin * d_, hjd = heads_of(j).size() * d_;
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t t = 0; t < T_; ++t) {
        std::memcpy(out + (b * T_ + t) * H_ * d_ + h0, q, size_t(hjd) * 4);
        q += hjd;
      }
  }
}

// K and V of [B, Tg, 3, Hu, d] -> [B, Tg, 2, Hu, d].
void SequenceParallelAttention::pack_kv(const float* qkv_g, float* kv) const {
  const int64_t hd = Hu_ * d_;
  for (int64_t bt = 0; bt < B_ * Tg_; ++bt) std::memcpy(kv + bt * 2 * hd, qkv_g + bt * 3 * hd + hd, size_t(2 * hd) * 4);
}

void SequenceParallelAttention::ring_attention(const float* qkv_g, float* out_g) {
  const int next = (r_ + 1) % R_, prev = (r_ + R_ - 1) % R_;
  const size_t bytes = kv_[0].size() * 4;  // always the largest block: one registration per buffer
  const int64_t rows = B_ * Hu_ * Tg_;
  std::fill(acc_.begin(), acc_.end(), 0.0f);
  std::fill(lse_acc_.begin(), lse_acc_.end(), -std::numeric_limits<float>::infinity());
  pack_kv(qkv_g, kv_[0].data());
  const uint32_t tag0 = tag_;
  tag_ += uint32_t(R_);
  P2PHandle send, recv;
  for (int s = 0; s < R_; ++s) {
    const int cur = s % 2;
    if (s + 1 < R_) {  // post the next block's transfer before computing on this one
      {
        profile::Scope pw(profile::Cat::Waiting);
        send.wait();     // the buffer we receive into was being sent one step ago
      }
      profile::Scope pc(profile::Cat::Communication);
      profile::add_bytes(bytes);
      recv = ring_->irecv(kv_[1 - cur].data(), bytes, prev, tag0 + uint32_t(s));
      send = ring_->isend(kv_[cur].data(), bytes, next, tag0 + uint32_t(s));
    }
    const int64_t tj = group_tokens((r_ - s + R_) % R_);  // whose K/V we hold at step s
    if (Tg_ > 0 && tj > 0) {
      const float* kv = kv_[cur].data();
      by_kv_len_.at(tj).run(qkv_g, kv, kv + Hu_ * d_, part_.data(), lse_part_.data());
      attention_merge(acc_.data(), lse_acc_.data(), part_.data(), lse_part_.data(), rows, d_);
    }
    profile::Scope pw(profile::Cat::Waiting);
    recv.wait();
  }
  {
    profile::Scope pw(profile::Cat::Waiting);
    send.wait();
  }
  // acc [B, Hu, Tg, d] -> out_g [B, Tg, Hu, d]
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t h = 0; h < Hu_; ++h)
      for (int64_t t = 0; t < Tg_; ++t)
        std::memcpy(out_g + ((b * Tg_ + t) * Hu_ + h) * d_, acc_.data() + ((b * Hu_ + h) * Tg_ + t) * d_,
                    size_t(d_) * 4);
}

void SequenceParallelAttention::forward(const float* qkv, float* out) {
  DIT_CHECK(prepared_, "sequence-parallel attention: forward before prepare()");
  const float* qkv_g = qkv;  // U == 1: the group is this rank
  float* out_g = U_ > 1 ? out_g_.data() : out;
  if (U_ > 1) {
    ulysses_scatter_heads(qkv);
    qkv_g = qkv_g_.data();
  }
  if (R_ > 1) {
    ring_attention(qkv_g, out_g);
  } else if (Tg_ > 0) {
    local_.run(qkv_g, qkv_g + Hu_ * d_, qkv_g + 2 * Hu_ * d_, out_g, nullptr);
  }
  if (U_ > 1) ulysses_gather_heads(out);
}

}  // namespace

std::unique_ptr<SelfAttention> make_sequence_parallel_attention(std::shared_ptr<ProcessGroup> ulysses,
                                                                std::shared_ptr<ProcessGroup> ring) {
  return std::make_unique<SequenceParallelAttention>(std::move(ulysses), std::move(ring));
}

}  // namespace dit
