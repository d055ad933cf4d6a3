// Ulysses (parallel/parallel_attention.h): q, k, v of this rank's tokens for every rank's
// heads become q, k, v of the group's tokens for this rank's heads, attention runs on them, and
// the outputs go back. One chunk: two strided all-to-alls; chunks: every block posted at once
// and computed as it arrives (docs/overlap.md). bf16 (an even head_dim) moves the kernels' bf16
// form, with a ring (USP) too.
#include <cstring>

#include "parallel/sequence_parallel_attention.h"
#include "runtime/elementwise.h"
#include "runtime/profile.h"

namespace dit::detail {

void SequenceParallelAttention::prepare_ulysses() {
  chunk_heads_.assign(size_t(C_ * U_), TokenRange{});
  for (int j = 0; j < U_; ++j) {
    const std::vector<TokenRange> parts = split_all(heads_of(j).size(), C_);
    for (int c = 0; c < C_; ++c)
      chunk_heads_[size_t(c * U_ + j)] = {heads_of(j).begin + parts[size_t(c)].begin,
                                          heads_of(j).begin + parts[size_t(c)].end};
  }
  uly16_ = compute_ == DType::BF16 && d_ % 2 == 0;  // (with a ring, C_ is 1)
  uly_window_ = qkv_in_window_ = false;
  if (C_ == 1) {
    prepare_ulysses_blocks();
    // On one machine, without a ring: through the windows, the attention's tasks shared
    // (collective: every Ulysses rank prepares the same shape), without the all-to-all's
    // staging buffers nor private planes. (USP's ring attends over private planes.)
    if (R_ > 1) return;
    const UlyssesWindowLayout w = ulysses_window_layout();
    planes_at_ = w.planes_at;
    out_at_ = w.out_at;
    tasks_at_ = w.tasks_at;
    uly_window_ = uly_->ensure_window(w.bytes);
    if (uly_window_) free_exchange_buffers();
    return;
  }
  const size_t n = size_t(C_ * U_);
  ss_off_.assign(n + 1, 0);
  sr_off_.assign(n + 1, 0);
  gs_off_.assign(n + 1, 0);
  gr_off_.assign(n + 1, 0);
  for (int c = 0; c < C_; ++c)
    for (int j = 0; j < U_; ++j) {
      const size_t i = size_t(c * U_ + j);
      const int64_t hj = chunk_heads(c, j).size(), hme = chunk_heads(c, u_).size(), tj = tokens_of(j).size();
      const bool remote = j != u_;
      ss_off_[i + 1] = ss_off_[i] + (remote ? size_t(B_ * T_ * 3 * hj * d_) : 0);
      sr_off_[i + 1] = sr_off_[i] + (remote ? size_t(B_ * tj * 3 * hme * d_) : 0);
      gs_off_[i + 1] = gs_off_[i] + (remote ? size_t(B_ * tj * hme * d_) : 0);
      gr_off_[i + 1] = gr_off_[i] + (remote ? size_t(B_ * T_ * hj * d_) : 0);
    }
  scatter_send_.assign(ss_off_[n] + 1, 0.0f);
  scatter_recv_.assign(sr_off_[n] + 1, 0.0f);
  gather_send_.assign(gs_off_[n] + 1, 0.0f);
  gather_recv_.assign(gr_off_[n] + 1, 0.0f);
  const int64_t hmax = chunk_heads(0, u_).size();  // the first chunk is the largest
  if (uly16_) {  // blocks travel as [3, B, hc, Tj, d] bf16 (half their float offsets' room)
    Buf().swap(chunk_qkv_);
    qkv16_.assign(size_t(3 * B_ * hmax * Tg_ * d_) + 2, 0);
    std::vector<uint16_t>().swap(out16_);  // the chunks' outputs travel in gather_send_ / gather_recv_
    std::vector<uint16_t>().swap(recv16_);
  } else {
    chunk_qkv_.assign(size_t(B_ * Tg_ * 3 * hmax * d_) + 1, 0.0f);
    std::vector<uint16_t>().swap(qkv16_);
  }
  chunk_out_.assign(size_t(B_ * Tg_ * hmax * d_) + 1, 0.0f);
  sends_.clear();
  recvs_.clear();
  sends_.resize(2 * n);
  recvs_.resize(2 * n);
}

// The one-chunk all-to-all's buffers, where windows take their place (or the whole group's
// windows were refused and the ring runs as asked).
void SequenceParallelAttention::free_exchange_buffers() {
  for (auto* v : {&send16_, &qkv16_, &out16_, &recv16_}) std::vector<uint16_t>().swap(*v);
  for (Buf* b : {&chunk_qkv_, &chunk_out_}) Buf().swap(*b);
}

// One chunk: the blocks of the two all-to-alls, and the group's q,k,v and outputs.
void SequenceParallelAttention::prepare_ulysses_blocks() {
  scatter_to_.clear();
  scatter_from_.clear();
  gather_to_.clear();
  gather_from_.clear();
  const size_t B = size_t(B_), T = size_t(T_), Tg = size_t(Tg_), H = size_t(H_), Hu = size_t(Hu_), d = size_t(d_);
  for (int j = 0; j < U_; ++j) {
    const size_t h0 = size_t(heads_of(j).begin), hj = size_t(heads_of(j).size());
    const size_t t0 = size_t(tokens_of(j).begin - tokens_of(0).begin), tj = size_t(tokens_of(j).size());
    // qkv [B, T, 3, H, d]: rank j's heads of every (token, q|k|v) row -> to j
    scatter_to_.push_back({h0 * d, B * T * 3, hj * d, H * d});
    // chunk_qkv_ [B, Tg, 3, Hu, d]: rank j's tokens, per batch item one contiguous run <- from j
    scatter_from_.push_back({t0 * 3 * Hu * d, B, tj * 3 * Hu * d, Tg * 3 * Hu * d});
    // chunk_out_ [B, Tg, Hu, d]: rank j's tokens of my heads -> to j
    gather_to_.push_back({t0 * Hu * d, B, tj * Hu * d, Tg * Hu * d});
    // out [B, T, H, d]: rank j's heads of every token row <- from j
    gather_from_.push_back({h0 * d, B * T, hj * d, H * d});
  }
  chunk_out_.assign(B * Tg * Hu * d + 1, 0.0f);
  for (Buf* b : {&scatter_send_, &scatter_recv_, &gather_send_, &gather_recv_}) Buf().swap(*b);
  if (!uly16_) {
    chunk_qkv_.assign(B * Tg * 3 * Hu * d + 1, 0.0f);
    for (auto* v : {&send16_, &qkv16_, &out16_, &recv16_}) std::vector<uint16_t>().swap(*v);
    return;
  }
  Buf().swap(chunk_qkv_);
  send16_off_.assign(size_t(U_) + 1, 0);
  for (int j = 0; j < U_; ++j) {
    const size_t hj = size_t(heads_of(j).size()), n = 3 * B * hj * T * d;
    const size_t t0 = size_t(tokens_of(j).begin - tokens_of(0).begin), tj = size_t(tokens_of(j).size());
    send16_off_[size_t(j) + 1] = send16_off_[size_t(j)] + n;
    // In floats (bf16 pairs): to j, its heads' [3, B, hj, T, d] in one run; from j, its tokens'
    // run of every (q|k|v, batch, head) row of [3, B, Hu, Tg, d].
    scatter_to_[size_t(j)] = {send16_off_[size_t(j)] / 2, 1, n / 2, n / 2};
    scatter_from_[size_t(j)] = {t0 * d / 2, 3 * B * Hu, tj * d / 2, Tg * d / 2};
  }
  // The outputs' return in bf16 pairs: gather_to_ and gather_from_ halved, over out16_ and
  // recv16_; the block to myself is empty (my heads go from chunk_out_ to out in f32).
  gather16_to_.clear();
  gather16_from_.clear();
  for (int j = 0; j < U_; ++j) {
    const StridedBlock a = gather_to_[size_t(j)], b = gather_from_[size_t(j)];
    const bool other = j != u_;
    gather16_to_.push_back(other ? StridedBlock{a.offset / 2, a.rows, a.width / 2, a.stride / 2} : StridedBlock{});
    gather16_from_.push_back(other ? StridedBlock{b.offset / 2, b.rows, b.width / 2, b.stride / 2} : StridedBlock{});
  }
  send16_.assign(send16_off_[size_t(U_)] + 2, 0);
  qkv16_.assign(3 * B * Hu * Tg * d + 2, 0);
  out16_.assign(B * Tg * Hu * d + 2, 0);
  recv16_.assign(B * T * H * d + 2, 0);
}

// My tokens' q, k and v of heads `heads` as [3, B, heads, T, d] in the compute type (bf16
// Ulysses' messages; the windows' planes in either type), or with dst_tokens > 0 as tokens
// [first, first + T) of [3, B, heads, dst_tokens, d]. tokens >= 0: rows of that many tokens
// instead of mine (another rank's, read from its window).
void SequenceParallelAttention::pack_planes(QkvRows qkv, TokenRange heads, void* dst, int64_t dst_tokens,
                                            int64_t first, int64_t tokens) const {
  const int64_t T = tokens >= 0 ? tokens : T_;
  const AttnLayout in = AttnLayout::bthd(T, d_, H_, 3 * H_ * d_);  // [B, T, 3, H, d] per q|k|v plane
  const int64_t n = heads.size(), plane = B_ * n * (dst_tokens > 0 ? dst_tokens : T) * d_;
  for (int64_t p = 0; p < 3; ++p)
    to_dense(qkv, (p * H_ + heads.begin) * d_, in, n, T, static_cast<char*>(dst) + size_t(p * plane) * esz_,
             dst_tokens, first);
}

// ... for every rank j's heads, into send16_.
void SequenceParallelAttention::scatter16(QkvRows qkv) {
  for (int j = 0; j < U_; ++j) pack_planes(qkv, heads_of(j), send16_.data() + send16_off_[size_t(j)]);
}

// Ulysses without chunks (one machine, or --ulysses-chunks 1): q,k,v of my tokens for every
// rank's heads -> q,k,v of the group's tokens for my heads, attention, and back.
void SequenceParallelAttention::ulysses_all_to_all(QkvRows qkv, OutRows out) {
  if (uly16_) {
    exchange_and_attend16(qkv);
    return out.bf16 ? gather16(out.b16()) : gather16(out.f32());
  }
  {
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(B_ * T_ * 3 * (H_ - Hu_) * d_) * 4);
    uly_->all_to_all_strided(qkv.f32(), scatter_to_, chunk_qkv_.data(), scatter_from_);
  }
  attend(QkvRows{chunk_qkv_.data(), false}, chunk_out_.data(), Hu_);
  profile::Scope pc(profile::Cat::Communication);
  profile::add_bytes(uint64_t(B_ * (Tg_ - T_) * Hu_ * d_) * 4);
  uly_->all_to_all_strided(chunk_out_.data(), gather_to_, out.f32(), gather_from_);
}

// bf16, one chunk: q, k, v of my tokens for every rank's heads, in bf16, -> q, k, v of the
// group's tokens for my heads, and their attention into chunk_out_.
void SequenceParallelAttention::exchange_and_attend16(QkvRows qkv) {
  scatter16(qkv);  // the attention's conversion, done before the exchange
  {
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(B_ * T_ * 3 * (H_ - Hu_) * d_) * 2);
    uly_->all_to_all_strided(reinterpret_cast<const float*>(send16_.data()), scatter_to_,
                             reinterpret_cast<float*>(qkv16_.data()), scatter_from_);
  }
  attend16(Hu_);
}

// bf16, one chunk: the other ranks' tokens of my heads, rounded to bf16, go to them, and their
// heads of my tokens come into recv (bf16 in out's [B, T, H, d] layout: recv16_, or a bf16
// out itself).
void SequenceParallelAttention::exchange_outputs16(uint16_t* recv) {
  for (int j = 0; j < U_; ++j)
    if (j != u_) narrow_tokens(j, Hu_ * d_, out16_.data(), false);
  profile::Scope pc(profile::Cat::Communication);
  profile::add_bytes(uint64_t(B_ * (Tg_ - T_) * Hu_ * d_) * 2);
  uly_->all_to_all_strided(reinterpret_cast<const float*>(out16_.data()), gather16_to_, reinterpret_cast<float*>(recv),
                           gather16_from_);
}

// ... into an f32 out [B, T, H, d]: my own heads copied in f32, the other ranks' widened.
void SequenceParallelAttention::gather16(float* out) {
  const int64_t row = Hu_ * d_, h0 = heads_of(u_).begin * d_, t0 = tokens_of(u_).begin - tokens_of(0).begin;
  for (int64_t b = 0; b < B_; ++b)
    copy_cols(out + b * T_ * H_ * d_ + h0, H_ * d_, chunk_out_.data() + (b * Tg_ + t0) * row, row, T_, row);
  exchange_outputs16(recv16_.data());
  for (int j = 0; j < U_; ++j)
    if (j != u_) {
      const int64_t hj0 = heads_of(j).begin * d_, hjd = heads_of(j).size() * d_;
      widen_cols(out + hj0, H_ * d_, recv16_.data() + hj0, H_ * d_, B_ * T_, hjd);
    }
}

// ... into a bf16 out: the other ranks' heads land in it as they arrive, my own heads are
// rounded into it.
void SequenceParallelAttention::gather16(uint16_t* out) {
  const int64_t row = Hu_ * d_, h0 = heads_of(u_).begin * d_, t0 = tokens_of(u_).begin - tokens_of(0).begin;
  for (int64_t b = 0; b < B_; ++b)
    narrow_cols(out + b * T_ * H_ * d_ + h0, H_ * d_, chunk_out_.data() + (b * Tg_ + t0) * row, row, T_, row);
  exchange_outputs16(out);
}

// Rank j's tokens of chunk_out_ [B, Tg, hc, d] (hcd = hc·d) rounded to bf16: into the same
// places of dst, [B, Tg, hc, d] (gather16), or packed as [B, Tj, hc, d] (a chunk's message).
void SequenceParallelAttention::narrow_tokens(int j, int64_t hcd, uint16_t* dst, bool packed) const {
  const int64_t tj = tokens_of(j).size(), t0 = tokens_of(j).begin - tokens_of(0).begin;
  for (int64_t b = 0; b < B_; ++b) {
    const float* x = chunk_out_.data() + (b * Tg_ + t0) * hcd;
    uint16_t* y = dst + (packed ? b * tj : b * Tg_ + t0) * hcd;
    parallel_split(size_t(tj * hcd), 4, [&](size_t first, size_t n) { to_bf16(x + first, y + first, int64_t(n)); });
  }
}

// Packs every chunk's q,k,v for every peer ([B, T, 3, H, d] -> [B, T, 3, hc_j, d] blocks) and
// posts all receives and sends of the forward's scatter, chunk 0 first on every link.
void SequenceParallelAttention::post_scatter(QkvRows qkv, uint32_t tag0) {
  const size_t n = size_t(C_ * U_);
  profile::Scope pc(profile::Cat::Communication);
  for (int c = 0; c < C_; ++c)
    for (int j = 0; j < U_; ++j) {
      const size_t i = size_t(c * U_ + j);
      if (j == u_) continue;
      if (sr_off_[i + 1] > sr_off_[i])
        recvs_[i] = uly_->irecv(scatter_recv_.data() + sr_off_[i], (sr_off_[i + 1] - sr_off_[i]) * (uly16_ ? 2 : 4), j,
                                tag0 + c);
      if (gr_off_[i + 1] > gr_off_[i])
        recvs_[n + i] = uly_->irecv(gather_recv_.data() + gr_off_[i], (gr_off_[i + 1] - gr_off_[i]) * (uly16_ ? 2 : 4),
                                    j, tag0 + uint32_t(C_ + c));
    }
  for (int c = 0; c < C_; ++c)
    for (int j = 0; j < U_; ++j) {
      const size_t i = size_t(c * U_ + j);
      if (j == u_ || ss_off_[i + 1] == ss_off_[i]) continue;
      const int64_t h0 = chunk_heads(c, j).begin * d_, hjd = chunk_heads(c, j).size() * d_;
      if (uly16_)
        pack_planes(qkv, chunk_heads(c, j), scatter_send_.data() + ss_off_[i]);
      else
        copy_cols(scatter_send_.data() + ss_off_[i], hjd, qkv.f32() + h0, H_ * d_, B_ * T_ * 3,
                  hjd);  // rows (b, t, q|k|v)
      const size_t bytes = (ss_off_[i + 1] - ss_off_[i]) * (uly16_ ? 2 : 4);
      profile::add_bytes(bytes);
      sends_[i] = uly_->isend(scatter_send_.data() + ss_off_[i], bytes, j, tag0 + c);
    }
}

// Waits for chunk c's blocks and assembles chunk_qkv_ [B, Tg, 3, hc, d] (the group's tokens in
// rank order; my own tokens straight from qkv).
void SequenceParallelAttention::unpack_chunk(QkvRows qkv, int c) {
  if (uly16_) return unpack_chunk16(qkv, c);
  const int64_t hc = chunk_heads(c, u_).size(), row = 3 * hc * d_;
  const int64_t h0 = chunk_heads(c, u_).begin * d_;
  for (int j = 0; j < U_; ++j) {
    const size_t i = size_t(c * U_ + j);
    const TokenRange tj = tokens_of(j);
    const int64_t t0 = tj.begin - tokens_of(0).begin;
    if (j == u_) {
      for (int64_t b = 0; b < B_; ++b)  // rows (t, q|k|v) of batch b
        copy_cols(chunk_qkv_.data() + (b * Tg_ + t0) * row, hc * d_,
                  qkv.f32() + b * T_ * 3 * H_ * d_ + h0, H_ * d_, T_ * 3, hc * d_);
      continue;
    }
    if (sr_off_[i + 1] == sr_off_[i]) continue;
    {
      profile::Scope pw(profile::Cat::Waiting);
      recvs_[i].wait();
    }
    // rows (b) of tj·3·hc·d: my tokens' runs of chunk_qkv_ <- the block
    copy_cols(chunk_qkv_.data() + t0 * row, Tg_ * row, scatter_recv_.data() + sr_off_[i], tj.size() * row, B_,
              tj.size() * row);
  }
}

// bf16: chunk c's [3, B, hc, Tg, d] in qkv16_, my tokens converted from qkv, each peer's
// [3, B, hc, Tj, d] block copied row by row into its tokens' place.
void SequenceParallelAttention::unpack_chunk16(QkvRows qkv, int c) {
  const TokenRange mine = chunk_heads(c, u_);
  const int64_t hc = mine.size(), rows = 3 * B_ * hc;
  for (int j = 0; j < U_; ++j) {
    const size_t i = size_t(c * U_ + j);
    const int64_t tj = tokens_of(j).size(), t0 = tokens_of(j).begin - tokens_of(0).begin;
    if (j == u_) {
      pack_planes(qkv, mine, qkv16_.data(), Tg_, t0);
      continue;
    }
    if (sr_off_[i + 1] == sr_off_[i]) continue;
    {
      profile::Scope pw(profile::Cat::Waiting);
      recvs_[i].wait();
    }
    const uint16_t* src = reinterpret_cast<const uint16_t*>(scatter_recv_.data() + sr_off_[i]);
    copy_cols(qkv16_.data() + t0 * d_, Tg_ * d_, src, tj * d_, rows, tj * d_);  // rows (q|k|v, b, h) of tj·d
  }
}

// chunk_out_ [B, Tg, hc, d] -> each peer's tokens to it (posted now), mine into out [B, T, H, d]
// (copied in f32, or rounded into a bf16 out).
void SequenceParallelAttention::post_gather_chunk(int c, OutRows out, uint32_t tag0) {
  const int64_t hc = chunk_heads(c, u_).size(), hcd = hc * d_, h0 = chunk_heads(c, u_).begin * d_;
  for (int j = 0; j < U_; ++j) {
    const size_t i = size_t(c * U_ + j);
    const TokenRange tj = tokens_of(j);
    const int64_t t0 = tj.begin - tokens_of(0).begin;
    if (j == u_) {
      for (int64_t b = 0; b < B_; ++b) {
        const float* mine = chunk_out_.data() + (b * Tg_ + t0) * hcd;
        const int64_t at = b * T_ * H_ * d_ + h0;
        if (out.bf16)
          narrow_cols(out.b16() + at, H_ * d_, mine, hcd, T_, hcd);
        else
          copy_cols(out.f32() + at, H_ * d_, mine, hcd, T_, hcd);
      }
      continue;
    }
    if (gs_off_[i + 1] == gs_off_[i]) continue;
    float* p = gather_send_.data() + gs_off_[i];
    if (uly16_) {
      narrow_tokens(j, hcd, reinterpret_cast<uint16_t*>(p), true);
    } else {  // rows (b) of tj·hc·d
      copy_cols(p, tj.size() * hcd, chunk_out_.data() + t0 * hcd, Tg_ * hcd, B_, tj.size() * hcd);
    }
    const size_t bytes = (gs_off_[i + 1] - gs_off_[i]) * (uly16_ ? 2 : 4);
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(bytes);
    sends_[size_t(C_ * U_) + i] = uly_->isend(gather_send_.data() + gs_off_[i], bytes, j, tag0 + uint32_t(C_ + c));
  }
}

// Waits for the other ranks' outputs of my tokens and writes them into out [B, T, H, d]
// (bf16 blocks widened into an f32 out, copied into a bf16 one); then for every send, so that
// the buffers may be reused.
void SequenceParallelAttention::finish_gather(OutRows out) {
  const size_t n = size_t(C_ * U_);
  for (int c = 0; c < C_; ++c)
    for (int j = 0; j < U_; ++j) {
      const size_t i = size_t(c * U_ + j);
      if (j == u_ || gr_off_[i + 1] == gr_off_[i]) continue;
      {
        profile::Scope pw(profile::Cat::Waiting);
        recvs_[n + i].wait();
      }
      const int64_t h0 = chunk_heads(c, j).begin * d_, hjd = chunk_heads(c, j).size() * d_;
      const float* block = gather_recv_.data() + gr_off_[i];
      const uint16_t* block16 = reinterpret_cast<const uint16_t*>(block);
      if (out.bf16)
        copy_cols(out.b16() + h0, H_ * d_, block16, hjd, B_ * T_, hjd);
      else if (uly16_)
        widen_cols(out.f32() + h0, H_ * d_, block16, hjd, B_ * T_, hjd);
      else
        copy_cols(out.f32() + h0, H_ * d_, block, hjd, B_ * T_, hjd);
    }
  profile::Scope pw(profile::Cat::Waiting);
  for (P2PHandle& h : sends_) h.wait();
}

// Ulysses: scatter all chunks at once; then per chunk wait, attend, send the outputs back, so
// chunk c+1's q,k,v and chunk c's outputs travel while chunk c+1 is computed.
void SequenceParallelAttention::ulysses_forward(QkvRows qkv, OutRows out) {
  if (C_ == 1) return uly_window_ ? ulysses_window(qkv, out) : ulysses_all_to_all(qkv, out);
  const uint32_t tag0 = tag_;
  tag_ += uint32_t(2 * C_);
  post_scatter(qkv, tag0);
  for (int c = 0; c < C_; ++c) {
    unpack_chunk(qkv, c);
    if (uly16_)
      attend16(chunk_heads(c, u_).size());
    else
      attend(QkvRows{chunk_qkv_.data(), false}, chunk_out_.data(), chunk_heads(c, u_).size());
    post_gather_chunk(c, out, tag0);
  }
  finish_gather(out);
}

// bf16 Ulysses: attention over qkv16_'s [3, B, heads, Tg, d] -> chunk_out_ [B, Tg, heads, d].
void SequenceParallelAttention::attend16(int64_t heads) {
  // USP: the ring over qkv16_'s planes (even with no tokens: this rank passes K/V on).
  if (R_ > 1) return ring_attention(QkvRows{qkv16_.data(), true, true}, chunk_out_.data());
  if (Tg_ == 0 || heads == 0) return;
  const size_t plane = size_t(B_ * heads * Tg_ * d_);
  by_heads_.at(heads).run_dense(qkv16_.data(), qkv16_.data() + plane, qkv16_.data() + 2 * plane, chunk_out_.data(),
                                nullptr);
}

}  // namespace dit::detail
