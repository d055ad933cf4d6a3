#include "parallel/parallel_attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

// rows × width floats from a matrix with src_stride floats per row into one with dst_stride
// (the head block of every row, out of or into [.., H·d] rows).
void copy_cols(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_stride, src + r * src_stride, size_t(width) * 4);
}

class SequenceParallelAttention final : public SelfAttention {
 public:
  SequenceParallelAttention(std::shared_ptr<ProcessGroup> ulysses, std::shared_ptr<ProcessGroup> ring, int chunks)
      : uly_(std::move(ulysses)), ring_(std::move(ring)), chunks_wanted_(chunks) {
    DIT_CHECK(chunks >= 1, "sequence-parallel attention: " << chunks << " Ulysses chunks (at least 1)");
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
  // Heads of Ulysses rank j in chunk c (absolute head indices).
  TokenRange chunk_heads(int c, int j) const { return chunk_heads_[size_t(c * U_ + j)]; }
  TokenRange tokens_of(int j) const { return ranges_[size_t(r_ * U_ + j)]; }  // Ulysses rank j's tokens
  void prepare_ulysses();
  void prepare_ulysses_blocks();
  void ulysses_forward(const float* qkv, float* out);
  void ulysses_all_to_all(const float* qkv, float* out);
  void scatter16(const float* qkv);
  void pack16(const float* qkv, TokenRange heads, uint16_t* dst, int64_t dst_tokens = 0, int64_t first = 0) const;
  void unpack_chunk16(const float* qkv, int c);
  void attend16(int64_t heads);
  void post_scatter(const float* qkv, uint32_t tag0);
  void unpack_chunk(const float* qkv, int c);
  void post_gather_chunk(int c, float* out, uint32_t tag0);
  void finish_gather(float* out);
  void attend(const float* qkv_g, float* out_g, int64_t heads);
  void ring_attention(const float* qkv_g, float* out_g);
  void ring_attention_window(const float* qkv_g, float* out_g);
  const void* queries(const float* qkv_g);
  void attend_block(int step, const void* q, const char* kv, int64_t tj, float* out_g);
  void pack_block(const float* qkv_g, char* block) const;

  std::shared_ptr<ProcessGroup> uly_, ring_;
  int U_ = 1, R_ = 1, u_ = 0, r_ = 0;
  int chunks_wanted_ = 1, C_ = 1;
  int64_t B_ = 0, H_ = 0, Hu_ = 0, d_ = 0, T_ = 0, Tg_ = 0, Tmax_ = 0;
  std::vector<TokenRange> ranges_;       // tokens of sequence-parallel rank s
  std::vector<TokenRange> head_ranges_;  // heads of Ulysses rank j (uneven when U does not divide H)
  std::vector<TokenRange> chunk_heads_;  // [c * U + j]: rank j's heads of chunk c
  bool prepared_ = false;

  // Ulysses, pipelined over C_ chunks of heads. Every (chunk, peer) block has its own place in
  // four buffers, so all of a forward's transfers can be in flight at once:
  //   scatter_send_: to j, my tokens' q,k,v of j's chunk-c heads      [B, T,  3, hc_j, d]
  //   scatter_recv_: from j, its tokens' q,k,v of my chunk-c heads    [B, Tj, 3, hc,   d]
  //   gather_send_:  to j, its tokens' outputs of my chunk-c heads    [B, Tj, hc,   d]
  //   gather_recv_:  from j, my tokens' outputs of j's chunk-c heads  [B, T,  hc_j, d]
  // Offsets are [c * U + j] (the block to myself is never sent: it is copied in place).
  Buf scatter_send_, scatter_recv_, gather_send_, gather_recv_, chunk_qkv_, chunk_out_;
  std::vector<size_t> ss_off_, sr_off_, gs_off_, gr_off_;
  std::vector<P2PHandle> sends_, recvs_;  // [phase * C * U + c * U + j], phase 0 scatter, 1 gather
  // Ulysses without chunks: two strided all-to-alls, each block read from its rows and written
  // into its rows (no staging buffers): [j] = rank j's block in qkv / chunk_qkv_ (scatter),
  // chunk_out_ / out (gather).
  std::vector<StridedBlock> scatter_to_, scatter_from_, gather_to_, gather_from_;
  // ... and in bf16 without a ring (uly16_): each rank converts its q,k,v once into the
  // kernels' form per destination (send16_: for rank j, [3, B, hj, T, d] at send16_off_[j]),
  // the scatter moves half the bytes into qkv16_ ([3, B, Hu, Tg, d]: q, k and v each dense),
  // and the attention reads that as it is (run_dense): the conversion it would do, done before
  // the exchange. bf16 pairs travel as 4-byte units, so the scatter's blocks count floats:
  // every size is a multiple of d, which must be even (else the f32 exchange is used). With
  // chunks the same: each (chunk, peer) block is [3, B, hc_j, T, d] bf16 in scatter_send_'s
  // room for it, and qkv16_ holds one chunk's [3, B, hc, Tg, d].
  bool uly16_ = false;
  std::vector<uint16_t> send16_, qkv16_;
  std::vector<size_t> send16_off_;
  // Attention over the group's tokens by heads per call (no ring), or per K/V block length (ring).
  std::map<int64_t, Attention> by_heads_;
  std::map<int64_t, Attention> by_kv_len_;
  // Ring. A K/V block of tj tokens is K then V, each dense [B, Hu, tj, d] in the compute type
  // (bf16: half the bytes), converted once by its owner (attention_to_dense); in bf16 the
  // queries are converted once per forward into q_dense_ for all blocks (Attention::run_dense).
  // On one machine every rank's block lies in a shared-memory window the others read in place
  // (window_); else blocks travel as messages through kv_.
  bool window_ = false;
  DType compute_ = DType::F32;
  size_t esz_ = 4;  // bytes per element of the dense forms
  std::vector<char> q_dense_;
  Buf kv_[2], lse_acc_, part_, lse_part_;
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

  compute_ = s.compute;
  esz_ = compute_ == DType::BF16 ? 2 : 4;
  uly16_ = false;  // prepare_ulysses_blocks decides
  // Chunks pipeline Ulysses only without a ring (USP runs the ring over all of its heads at once).
  C_ = U_ > 1 && R_ == 1 ? int(std::min<int64_t>(chunks_wanted_, heads_of(0).size())) : 1;
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
    // One object per heads-per-call: Hu (no chunks) or the chunk sizes, [B, Tg, 3, hc, d] in place.
    for (int c = 0; c < C_ && Tg_ > 0; ++c) {
      const int64_t hc = U_ > 1 ? chunk_heads(c, u_).size() : Hu_;
      if (hc == 0 || by_heads_.count(hc)) continue;
      a.heads = hc;
      a.q_len = a.kv_len = Tg_;
      a.q = a.k = a.v = uly16_ ? AttnLayout::bhtd(hc, Tg_, d_) : AttnLayout::bthd(Tg_, d_, hc, 3 * hc * d_);
      a.out = AttnLayout::bthd(Tg_, d_, hc, hc * d_);
      by_heads_.emplace(hc, Attention(a));
    }
  } else {
    // K and V dense [B, Hu, tokens, d] in the compute type (run_dense), and Q too in bf16 (f32
    // reads it in place from [B, Tg, 3, Hu, d]); outputs [B, Tg, Hu, d]
    // as the caller's (the first block's straight into it, the others' into part_ and merged
    // into it), lse [B, Hu, Tg].
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
    q_dense_.assign(compute_ == DType::BF16 ? size_t(B_ * Hu_ * Tg_ * d_) * esz_ + 1 : 0, 0);
    const size_t block_bytes = size_t(2 * B_ * Tmax_ * Hu_ * d_) * esz_;  // the largest block
    const size_t kv_elems = block_bytes / sizeof(float) + 1;
    window_ = ring_->ensure_window(kv_elems * sizeof(float));  // collective: every ring rank prepares
    static std::atomic<bool> warned{false};
    if (!window_ && ring_->uses_shared_memory() && r_ == 0 && !std::getenv("DIT_NO_SHM_WINDOWS") && !warned.exchange(true))
      std::fprintf(stderr, "warning: ring attention: K/V blocks go as messages instead of shared-memory windows: %s\n",
                   ring_->window_note().c_str());
    for (Buf& b : kv_) {
      if (window_) {
        Buf().swap(b);
      } else {
        b.assign(kv_elems, 0.0f);
      }
    }
    part_.assign(size_t(B_ * Hu_ * Tg_ * d_) + 1, 0.0f);
    lse_acc_.assign(size_t(B_ * Hu_ * Tg_) + 1, 0.0f);
    lse_part_.assign(lse_acc_.size(), 0.0f);
  }
  prepared_ = true;
}

void SequenceParallelAttention::prepare_ulysses() {
  chunk_heads_.assign(size_t(C_ * U_), TokenRange{});
  for (int j = 0; j < U_; ++j) {
    const std::vector<TokenRange> parts = split_all(heads_of(j).size(), C_);
    for (int c = 0; c < C_; ++c)
      chunk_heads_[size_t(c * U_ + j)] = {heads_of(j).begin + parts[size_t(c)].begin,
                                          heads_of(j).begin + parts[size_t(c)].end};
  }
  uly16_ = compute_ == DType::BF16 && R_ == 1 && d_ % 2 == 0;
  if (C_ == 1) return prepare_ulysses_blocks();
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
    std::vector<uint16_t>().swap(send16_);
    std::vector<uint16_t>().swap(qkv16_);
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
  send16_.assign(send16_off_[size_t(U_)] + 2, 0);
  qkv16_.assign(3 * B * Hu * Tg * d + 2, 0);
}

// bf16 Ulysses: my tokens' q, k and v of heads `heads` as [3, B, heads, T, d] bf16, or with
// dst_tokens > 0 as tokens [first, first + T) of [3, B, heads, dst_tokens, d].
void SequenceParallelAttention::pack16(const float* qkv, TokenRange heads, uint16_t* dst, int64_t dst_tokens,
                                       int64_t first) const {
  const AttnLayout in = AttnLayout::bthd(T_, d_, H_, 3 * H_ * d_);  // [B, T, 3, H, d] per q|k|v plane
  const int64_t n = heads.size(), plane = B_ * n * (dst_tokens > 0 ? dst_tokens : T_) * d_;
  for (int64_t p = 0; p < 3; ++p)
    attention_to_dense(qkv + (p * H_ + heads.begin) * d_, in, B_, n, T_, d_, DType::BF16, dst + size_t(p * plane),
                       dst_tokens, first);
}

// ... for every rank j's heads, into send16_.
void SequenceParallelAttention::scatter16(const float* qkv) {
  for (int j = 0; j < U_; ++j) pack16(qkv, heads_of(j), send16_.data() + send16_off_[size_t(j)]);
}

// Ulysses without chunks (one machine, or --ulysses-chunks 1): q,k,v of my tokens for every
// rank's heads -> q,k,v of the group's tokens for my heads, attention, and back.
void SequenceParallelAttention::ulysses_all_to_all(const float* qkv, float* out) {
  if (uly16_) {
    scatter16(qkv);  // the attention's conversion, done before the exchange
    {
      profile::Scope pc(profile::Cat::Communication);
      profile::add_bytes(uint64_t(B_ * T_ * 3 * (H_ - Hu_) * d_) * 2);
      uly_->all_to_all_strided(reinterpret_cast<const float*>(send16_.data()), scatter_to_,
                               reinterpret_cast<float*>(qkv16_.data()), scatter_from_);
    }
    attend16(Hu_);
  } else {
    {
      profile::Scope pc(profile::Cat::Communication);
      profile::add_bytes(uint64_t(B_ * T_ * 3 * (H_ - Hu_) * d_) * 4);
      uly_->all_to_all_strided(qkv, scatter_to_, chunk_qkv_.data(), scatter_from_);
    }
    attend(chunk_qkv_.data(), chunk_out_.data(), Hu_);
  }
  profile::Scope pc(profile::Cat::Communication);
  profile::add_bytes(uint64_t(B_ * (Tg_ - T_) * Hu_ * d_) * 4);
  uly_->all_to_all_strided(chunk_out_.data(), gather_to_, out, gather_from_);
}

// Packs every chunk's q,k,v for every peer ([B, T, 3, H, d] -> [B, T, 3, hc_j, d] blocks) and
// posts all receives and sends of the forward's scatter, chunk 0 first on every link.
void SequenceParallelAttention::post_scatter(const float* qkv, uint32_t tag0) {
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
        recvs_[n + i] = uly_->irecv(gather_recv_.data() + gr_off_[i], (gr_off_[i + 1] - gr_off_[i]) * 4, j,
                                    tag0 + uint32_t(C_ + c));
    }
  for (int c = 0; c < C_; ++c)
    for (int j = 0; j < U_; ++j) {
      const size_t i = size_t(c * U_ + j);
      if (j == u_ || ss_off_[i + 1] == ss_off_[i]) continue;
      const int64_t h0 = chunk_heads(c, j).begin * d_, hjd = chunk_heads(c, j).size() * d_;
      if (uly16_)
        pack16(qkv, chunk_heads(c, j), reinterpret_cast<uint16_t*>(scatter_send_.data() + ss_off_[i]));
      else
        copy_cols(scatter_send_.data() + ss_off_[i], hjd, qkv + h0, H_ * d_, B_ * T_ * 3, hjd);  // rows (b, t, q|k|v)
      const size_t bytes = (ss_off_[i + 1] - ss_off_[i]) * (uly16_ ? 2 : 4);
      profile::add_bytes(bytes);
      sends_[i] = uly_->isend(scatter_send_.data() + ss_off_[i], bytes, j, tag0 + c);
    }
}

// Waits for chunk c's blocks and assembles chunk_qkv_ [B, Tg, 3, hc, d] (the group's tokens in
// rank order; my own tokens straight from qkv).
void SequenceParallelAttention::unpack_chunk(const float* qkv, int c) {
  if (uly16_) return unpack_chunk16(qkv, c);
  const int64_t hc = chunk_heads(c, u_).size(), row = 3 * hc * d_;
  const int64_t h0 = chunk_heads(c, u_).begin * d_;
  for (int j = 0; j < U_; ++j) {
    const size_t i = size_t(c * U_ + j);
    const TokenRange tj = tokens_of(j);
    const int64_t t0 = tj.begin - tokens_of(0).begin;
    if (j == u_) {
      for (int64_t b = 0; b < B_; ++b)  // rows (t, q|k|v) of batch b
        copy_cols(chunk_qkv_.data() + (b * Tg_ + t0) * row, hc * d_, qkv + b * T_ * 3 * H_ * d_ + h0, H_ * d_, T_ * 3,
                  hc * d_);
      continue;
    }
    if (sr_off_[i + 1] == sr_off_[i]) continue;
    {
      profile::Scope pw(profile::Cat::Waiting);
      recvs_[i].wait();
    }
    const float* q = scatter_recv_.data() + sr_off_[i];
    for (int64_t b = 0; b < B_; ++b, q += tj.size() * row)
      std::memcpy(chunk_qkv_.data() + (b * Tg_ + t0) * row, q, size_t(tj.size() * row) * 4);
  }
}

// bf16: chunk c's [3, B, hc, Tg, d] in qkv16_, my tokens converted from qkv, each peer's
// [3, B, hc, Tj, d] block copied row by row into its tokens' place.
void SequenceParallelAttention::unpack_chunk16(const float* qkv, int c) {
  const TokenRange mine = chunk_heads(c, u_);
  const int64_t hc = mine.size(), rows = 3 * B_ * hc;
  for (int j = 0; j < U_; ++j) {
    const size_t i = size_t(c * U_ + j);
    const int64_t tj = tokens_of(j).size(), t0 = tokens_of(j).begin - tokens_of(0).begin;
    if (j == u_) {
      pack16(qkv, mine, qkv16_.data(), Tg_, t0);
      continue;
    }
    if (sr_off_[i + 1] == sr_off_[i]) continue;
    {
      profile::Scope pw(profile::Cat::Waiting);
      recvs_[i].wait();
    }
    const uint16_t* src = reinterpret_cast<const uint16_t*>(scatter_recv_.data() + sr_off_[i]);
    for (int64_t r = 0; r < rows; ++r)  // rows (q|k|v, b, h) of tj·d
      std::memcpy(qkv16_.data() + size_t((r * Tg_ + t0) * d_), src + r * tj * d_, size_t(tj * d_) * 2);
  }
}

// chunk_out_ [B, Tg, hc, d] -> each peer's tokens to it (posted now), mine into out [B, T, H, d].
void SequenceParallelAttention::post_gather_chunk(int c, float* out, uint32_t tag0) {
  const int64_t hc = chunk_heads(c, u_).size(), hcd = hc * d_, h0 = chunk_heads(c, u_).begin * d_;
  for (int j = 0; j < U_; ++j) {
    const size_t i = size_t(c * U_ + j);
    const TokenRange tj = tokens_of(j);
    const int64_t t0 = tj.begin - tokens_of(0).begin;
    if (j == u_) {
      for (int64_t b = 0; b < B_; ++b)
        copy_cols(out + b * T_ * H_ * d_ + h0, H_ * d_, chunk_out_.data() + (b * Tg_ + t0) * hcd, hcd, T_, hcd);
      continue;
    }
    if (gs_off_[i + 1] == gs_off_[i]) continue;
    float* p = gather_send_.data() + gs_off_[i];
    for (int64_t b = 0; b < B_; ++b, p += tj.size() * hcd)
      std::memcpy(p, chunk_out_.data() + (b * Tg_ + t0) * hcd, size_t(tj.size() * hcd) * 4);
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes((gs_off_[i + 1] - gs_off_[i]) * 4);
    sends_[size_t(C_ * U_) + i] =
        uly_->isend(gather_send_.data() + gs_off_[i], (gs_off_[i + 1] - gs_off_[i]) * 4, j, tag0 + uint32_t(C_ + c));
  }
}

// Waits for the other ranks' outputs of my tokens and writes them into out [B, T, H, d];
// then for every send, so that the buffers may be reused.
void SequenceParallelAttention::finish_gather(float* out) {
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
      copy_cols(out + h0, H_ * d_, gather_recv_.data() + gr_off_[i], hjd, B_ * T_, hjd);
    }
  profile::Scope pw(profile::Cat::Waiting);
  for (P2PHandle& h : sends_) h.wait();
}

// Ulysses: scatter all chunks at once; then per chunk wait, attend, send the outputs back, so
// chunk c+1's q,k,v and chunk c's outputs travel while chunk c+1 is computed.
void SequenceParallelAttention::ulysses_forward(const float* qkv, float* out) {
  if (C_ == 1) return ulysses_all_to_all(qkv, out);
  const uint32_t tag0 = tag_;
  tag_ += uint32_t(2 * C_);
  post_scatter(qkv, tag0);
  for (int c = 0; c < C_; ++c) {
    unpack_chunk(qkv, c);
    if (uly16_)
      attend16(chunk_heads(c, u_).size());
    else
      attend(chunk_qkv_.data(), chunk_out_.data(), chunk_heads(c, u_).size());
    post_gather_chunk(c, out, tag0);
  }
  finish_gather(out);
}

// bf16 Ulysses: attention over qkv16_'s [3, B, heads, Tg, d] -> chunk_out_ [B, Tg, heads, d].
void SequenceParallelAttention::attend16(int64_t heads) {
  if (Tg_ == 0 || heads == 0) return;
  const size_t plane = size_t(B_ * heads * Tg_ * d_);
  by_heads_.at(heads).run_dense(qkv16_.data(), qkv16_.data() + plane, qkv16_.data() + 2 * plane, chunk_out_.data(),
                                nullptr);
}

// Attention of the group's tokens over `heads` heads: [B, Tg, 3, heads, d] -> [B, Tg, heads, d].
void SequenceParallelAttention::attend(const float* qkv_g, float* out_g, int64_t heads) {
  if (R_ > 1) return ring_attention(qkv_g, out_g);  // even with no tokens: this rank passes K/V on
  if (Tg_ == 0 || heads == 0) return;
  const int64_t hd = heads * d_;
  by_heads_.at(heads).run(qkv_g, qkv_g + hd, qkv_g + 2 * hd, out_g, nullptr);
}

// The queries as the block attention reads them: bf16 converted once into q_dense_, f32 in place.
const void* SequenceParallelAttention::queries(const float* qkv_g) {
  if (compute_ != DType::BF16) return qkv_g;
  attention_to_dense(qkv_g, AttnLayout::bthd(Tg_, d_, Hu_, 3 * Hu_ * d_), B_, Hu_, Tg_, d_, compute_, q_dense_.data());
  return q_dense_.data();
}

// This rank's K/V block from [B, Tg, 3, Hu, d]: K, then V, each dense [B, Hu, Tg, d].
void SequenceParallelAttention::pack_block(const float* qkv_g, char* block) const {
  const int64_t hd = Hu_ * d_;
  const AttnLayout in = AttnLayout::bthd(Tg_, d_, Hu_, 3 * hd);
  attention_to_dense(qkv_g + hd, in, B_, Hu_, Tg_, d_, compute_, block);
  attention_to_dense(qkv_g + 2 * hd, in, B_, Hu_, Tg_, d_, compute_, block + size_t(B_ * Tg_ * hd) * esz_);
}

void SequenceParallelAttention::ring_attention(const float* qkv_g, float* out_g) {
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
// previous rank's, ...), so the merges, and the result, are those of the messages' path.
void SequenceParallelAttention::ring_attention_window(const float* qkv_g, float* out_g) {
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

// Step `step` of the ring: this rank's queries over a K/V block of tj tokens. The first (its
// own block, step 0) writes out_g and the lse directly: merging into nothing yet would copy
// them unchanged (attention_merge takes b when a's lse is -inf), so the bits are the same.
// Later blocks are merged into out_g, one (batch, head) at a time: its rows lie Hu·d apart.
void SequenceParallelAttention::attend_block(int step, const void* q, const char* kv, int64_t tj, float* out_g) {
  if (Tg_ == 0 || tj == 0) return;
  const Attention& a = by_kv_len_.at(tj);
  const char* v = kv + size_t(B_ * Hu_ * tj * d_) * esz_;
  if (step == 0) return a.run_dense(q, kv, v, out_g, lse_acc_.data());
  a.run_dense(q, kv, v, part_.data(), lse_part_.data());
  const int64_t row = Hu_ * d_;
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t h = 0; h < Hu_; ++h) {
      const int64_t o = b * Tg_ * row + h * d_, l = (b * Hu_ + h) * Tg_;
      attention_merge(out_g + o, lse_acc_.data() + l, part_.data() + o, lse_part_.data() + l, Tg_, d_, row, row);
    }
}

void SequenceParallelAttention::forward(const float* qkv, float* out) {
  DIT_CHECK(prepared_, "sequence-parallel attention: forward before prepare()");
  if (U_ > 1) return ulysses_forward(qkv, out);
  attend(qkv, out, Hu_);  // U == 1: the group is this rank, [B, T, 3, H, d] read in place
}

}  // namespace

std::unique_ptr<SelfAttention> make_sequence_parallel_attention(std::shared_ptr<ProcessGroup> ulysses,
                                                                std::shared_ptr<ProcessGroup> ring, int ulysses_chunks) {
  return std::make_unique<SequenceParallelAttention>(std::move(ulysses), std::move(ring), ulysses_chunks);
}

}  // namespace dit
