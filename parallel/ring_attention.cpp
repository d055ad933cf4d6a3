// Ring attention (parallel/parallel_attention.h): every rank keeps its queries and meets
// every rank's K/V block in turn, its rows' online softmax carried from block to block.
// Blocks travel round the ring as messages (double buffered, posted before the block's
// attention), or on one machine lie in their owners' shared-memory windows, read in the same
// order. (On one machine, given the sp group, a ring with at least as many heads as the
// group's ranks does not come here: it runs as Ulysses over the whole group,
// ulysses_window.cpp.)
#include "parallel/sequence_parallel_attention.h"
#include "runtime/profile.h"

namespace dit::detail {

// The queries as the block attention reads them: bf16 converted (or copied from bf16 rows) once
// into q_dense_, or read in place from the planes Ulysses' bf16 exchange left; f32 in place.
const void* SequenceParallelAttention::queries(QkvRows qkv_g) {
  if (compute_ != DType::BF16) return qkv_g.f32();
  if (qkv_g.planes) return qkv_g.b16();  // plane 0: q dense [B, Hu, Tg, d]
  to_dense(qkv_g, 0, AttnLayout::bthd(Tg_, d_, Hu_, 3 * Hu_ * d_), Hu_, Tg_, q_dense_.data());
  return q_dense_.data();
}

// This rank's K/V block from [B, Tg, 3, Hu, d]: K, then V, each dense [B, Hu, Tg, d] (from
// planes: planes 1 and 2 as they are).
void SequenceParallelAttention::pack_block(QkvRows qkv_g, char* block) const {
  const int64_t hd = Hu_ * d_;
  if (qkv_g.planes) {
    const size_t plane = size_t(B_ * Hu_ * Tg_ * d_);
    copy_block_parallel(qkv_g.b16() + plane, kFlat, 0, reinterpret_cast<uint16_t*>(block), kFlat, 0, 2 * plane);
    return;
  }
  const AttnLayout in = AttnLayout::bthd(Tg_, d_, Hu_, 3 * hd);
  to_dense(qkv_g, hd, in, Hu_, Tg_, block);
  to_dense(qkv_g, 2 * hd, in, Hu_, Tg_, block + size_t(B_ * Tg_ * hd) * esz_);
}

void SequenceParallelAttention::ring_attention(QkvRows qkv_g, float* out_g) {
  if (window_) return ring_attention_window(qkv_g, out_g);
  const int next = (r_ + 1) % R_, prev = (r_ + R_ - 1) % R_;
  const size_t bytes = kv_[0].size() * 4;  // always the largest block: one registration per buffer
  const void* q = queries(qkv_g);
  pack_block(qkv_g, reinterpret_cast<char*>(kv_[0].data()));
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
    attend_block(s, q, reinterpret_cast<const char*>(kv_[cur].data()), tj, out_g);
    profile::Scope pw(profile::Cat::Waiting);
    recv.wait();
  }
  profile::Scope pw(profile::Cat::Waiting);
  send.wait();
}

// The ring on one machine: this rank writes its K/V block once into its window, and reads
// every other rank's block where it lies, in the ring's order (its own first, then the
// previous rank's, ...), so the result is that of the messages' path.
void SequenceParallelAttention::ring_attention_window(QkvRows qkv_g, float* out_g) {
  float* mine;
  {
    profile::Scope pw(profile::Cat::Waiting);  // until every rank has read the last layer's blocks
    mine = ring_->window_begin();
  }
  const void* q = queries(qkv_g);
  pack_block(qkv_g, reinterpret_cast<char*>(mine));
  profile::add_bytes(size_t(B_ * Tg_ * 2 * Hu_ * d_) * esz_);
  ring_->window_publish();
  for (int s = 0; s < R_; ++s) {
    const int j = (r_ - s + R_) % R_;
    const float* kv;
    {
      profile::Scope pw(profile::Cat::Waiting);
      kv = ring_->window_peer(j);
    }
    attend_block(s, q, reinterpret_cast<const char*>(kv), group_tokens(j), out_g);
  }
  ring_->window_release();
}

// Step `step` of the ring: this rank's queries over a K/V block of tj tokens, continuing the
// rows' online softmax where the previous block left it (Attention::run_dense_part: m, l and
// the unnormalised output carried in m_acc_, l_acc_ and out_g), as one attention over the
// blocks in the ring's order would; the last block with tokens normalises out_g. (Before, each
// block's output was normalised and merged into out_g by log-sum-exp: a store and a merge
// pass per block, which at 8 ranks were a fifth of the attention's time.)
void SequenceParallelAttention::attend_block(int step, const void* q, const char* kv, int64_t tj, float* out_g) {
  if (Tg_ == 0 || tj == 0) return;
  const Attention& a = by_kv_len_.at(tj);
  const char* v = kv + size_t(B_ * Hu_ * tj * d_) * esz_;
  AttentionCarry carry;
  carry.m = m_acc_.data();
  carry.l = l_acc_.data();
  carry.first = step == 0;  // its own block: Tg > 0 tokens
  carry.last = step == last_step_;
  a.run_dense_part(q, kv, v, out_g, carry);
}

}  // namespace dit::detail
