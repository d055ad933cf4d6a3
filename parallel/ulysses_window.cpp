// Ulysses on one machine through the group's shared-memory windows (parallel/shm_exchange.h,
// "Windows"; docs/transport.md). The all-to-all copies each byte twice: into the sender's
// staging slot, and out of it into the receiver's rows. Here each rank's q, k, v rows lie in
// its window, where the QKV projection wrote them (qkv_destination()), and every rank reads its
// heads of the others' tokens from there straight into the layout its attention reads: one
// pass, which in bf16 is the conversion the kernels need anyway. The outputs return the same
// way: each rank copies the other ranks' tokens of its attention output into its window (bf16:
// rounds them in, as the all-to-all's sender did), and every rank reads its tokens of the
// others' heads from there into out.
//
// One forward is one use of the window, published in two stages: q, k, v in the window's first
// part, the output in its second, so that a rank writes its output while the others may still
// be reading its q, k, v, and nobody waits for anyone before its attention:
//   window_begin (qkv_destination, or here)  until every rank has read this rank's last output
//   rows in -> publish -> read every rank's q, k, v -> attention -> output in -> publish
//   -> read every rank's outputs -> release
// The same bits as the all-to-all path: the same values reach the same kernels.
#include <algorithm>

#include "parallel/sequence_parallel_attention.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"

namespace dit::detail {

// Where the outputs lie in each rank's window and the room it needs, the same on every rank of
// the group (ensure_window is collective): any rank's q, k, v rows, then from `out_at` (on its
// own cache line) any rank's attention output.
SequenceParallelAttention::UlyssesWindowLayout SequenceParallelAttention::ulysses_window_layout() const {
  const size_t esz = uly16_ ? 2 : 4;  // rows in qkv_dtype(); outputs returned in bf16 with it
  size_t rows = 0, outs = 0;
  for (int j = 0; j < U_; ++j) {
    rows = std::max(rows, size_t(B_ * tokens_of(j).size() * 3 * H_ * d_) * esz);
    outs = std::max(outs, size_t(B_ * Tg_ * heads_of(j).size() * d_) * esz);
  }
  const size_t out_at = (rows + 63) / 64 * 64;
  return {out_at, out_at + outs};
}

void* SequenceParallelAttention::qkv_destination() {
  if (!prepared_ || !uly_window_) return nullptr;
  DIT_CHECK(!qkv_in_window_, "ulysses attention: qkv_destination() twice without a forward");
  {
    profile::Scope pw(profile::Cat::Waiting);  // until every rank has read this rank's last output
    uly_win_ = reinterpret_cast<char*>(uly_->window_begin());
  }
  qkv_in_window_ = true;
  return uly_win_;
}

// (The attention writes its output into chunk_out_, and the other ranks' tokens are copied into
// the window: written straight into the shared mapping, the f32 attention at 4096 tokens took a
// median 555 ms against 545 ms for the private buffer and the copy in one run on the 2-core VM.)
void SequenceParallelAttention::ulysses_window(QkvRows qkv, OutRows out) {
  window_scatter(qkv);  // -> chunk_qkv_ [B, Tg, 3, Hu, d] f32, or qkv16_ [3, B, Hu, Tg, d] bf16
  if (uly16_)
    attend16(Hu_);  // -> chunk_out_ [B, Tg, Hu, d]
  else
    attend(QkvRows{chunk_qkv_.data(), false}, chunk_out_.data(), Hu_);
  window_gather(out);
}

// This rank's rows [B, T, 3, H, d] in the window (copied in unless the projection wrote them
// there), published; then every rank's tokens of my heads read out of its window.
void SequenceParallelAttention::window_scatter(QkvRows qkv) {
  const size_t n = size_t(B_ * T_ * 3 * H_ * d_);
  if (qkv_in_window_) {
    DIT_CHECK(qkv.p == uly_win_ && qkv.bf16 == uly16_,
              "ulysses attention: forward() after qkv_destination() must be given that pointer, in "
                  << (uly16_ ? "bf16" : "f32"));
    qkv_in_window_ = false;
  } else {  // the caller's own buffer: into the window, in its type (bf16 rounds as the kernels would)
    {
      profile::Scope pw(profile::Cat::Waiting);
      uly_win_ = reinterpret_cast<char*>(uly_->window_begin());
    }
    if (qkv.bf16 == uly16_) {
      const size_t bytes = n * (uly16_ ? 2 : 4);
      copy_block_parallel(static_cast<const char*>(qkv.p), kFlat, 0, uly_win_, kFlat, 0, bytes);
    } else {
      DIT_CHECK(!qkv.bf16, "ulysses attention: bf16 q, k, v with an f32 exchange");
      const float* x = qkv.f32();
      uint16_t* y = reinterpret_cast<uint16_t*>(uly_win_);
      parallel_split(n, 4, [&](size_t first, size_t len) { to_bf16(x + first, y + first, int64_t(len)); });
    }
  }
  uly_->window_publish();
  read_qkv_block(uly_win_, u_);  // my own tokens first: no wait
  for (int k = 1; k < U_; ++k) {
    const int j = (u_ + k) % U_;  // the ranks do not all read one window at once
    const void* rows;
    {
      profile::Scope pw(profile::Cat::Waiting);
      rows = uly_->window_peer(j);
    }
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(B_ * tokens_of(j).size() * 3 * Hu_ * d_) * (uly16_ ? 2 : 4));
    read_qkv_block(rows, j);
  }
}

// Rank j's rows [B, Tj, 3, H, d] (the window's type) -> its tokens of my heads in the
// attention's input: rows of chunk_qkv_ (f32), or bf16 planes of qkv16_ (q, k, v each
// [B, Hu, Tg, d]: the kernels' dense form).
void SequenceParallelAttention::read_qkv_block(const void* rows, int j) {
  const int64_t tj = tokens_of(j).size(), t0 = tokens_of(j).begin - tokens_of(0).begin;
  if (tj == 0) return;
  if (uly16_) return pack16(QkvRows{rows, true}, heads_of(u_), qkv16_.data(), Tg_, t0, tj);
  const float* x = static_cast<const float*>(rows);
  const int64_t hd = Hu_ * d_, h0 = heads_of(u_).begin * d_;
  for (int64_t b = 0; b < B_; ++b)  // rows (t, q|k|v) of batch b
    copy_cols(chunk_qkv_.data() + (b * Tg_ + t0) * 3 * hd, hd, x + b * tj * 3 * H_ * d_ + h0, H_ * d_, tj * 3, hd);
}

// This rank's attention output in chunk_out_ [B, Tg, Hu, d]: the other ranks' tokens of it into
// the window's second part, in their places (bf16: rounded, as the all-to-all's sender did),
// published; my own tokens copied into out, then every rank's heads of my tokens read out of
// its window.
void SequenceParallelAttention::window_gather(OutRows out) {
  const int64_t row = Hu_ * d_, h0 = heads_of(u_).begin * d_, t0 = tokens_of(u_).begin - tokens_of(0).begin;
  for (int j = 0; j < U_; ++j) {
    if (j == u_) continue;
    if (uly16_) {
      narrow_tokens(j, row, reinterpret_cast<uint16_t*>(uly_win_ + out_at_), false);
      continue;
    }
    const int64_t at = (tokens_of(j).begin - tokens_of(0).begin) * row, n = tokens_of(j).size() * row;
    copy_cols(reinterpret_cast<float*>(uly_win_ + out_at_) + at, Tg_ * row, chunk_out_.data() + at, Tg_ * row, B_, n);
  }
  uly_->window_publish();
  const float* mine = chunk_out_.data();
  for (int64_t b = 0; b < B_; ++b) {
    const float* x = mine + (b * Tg_ + t0) * row;
    const int64_t at = b * T_ * H_ * d_ + h0;
    if (out.bf16)
      narrow_cols(out.b16() + at, H_ * d_, x, row, T_, row);
    else
      copy_cols(out.f32() + at, H_ * d_, x, row, T_, row);
  }
  for (int k = 1; k < U_; ++k) {
    const int j = (u_ + k) % U_;
    const void* block;
    {
      profile::Scope pw(profile::Cat::Waiting);
      block = reinterpret_cast<const char*>(uly_->window_peer(j)) + out_at_;
    }
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(B_ * T_ * heads_of(j).size() * d_) * (uly16_ ? 2 : 4));
    read_out_block(block, j, out);
  }
  uly_->window_release();
}

// Rank j's output [B, Tg, Hj, d] (f32, or bf16 with uly16_) -> my tokens of its heads in out
// [B, T, H, d] (bf16 widened into an f32 out, copied into a bf16 one).
void SequenceParallelAttention::read_out_block(const void* block, int j, OutRows out) {
  const int64_t hjd = heads_of(j).size() * d_, hj0 = heads_of(j).begin * d_;
  const int64_t t0 = tokens_of(u_).begin - tokens_of(0).begin;
  for (int64_t b = 0; b < B_; ++b) {
    const int64_t from = (b * Tg_ + t0) * hjd, at = b * T_ * H_ * d_ + hj0;
    if (!uly16_)
      copy_cols(out.f32() + at, H_ * d_, static_cast<const float*>(block) + from, hjd, T_, hjd);
    else if (out.bf16)
      copy_cols(out.b16() + at, H_ * d_, static_cast<const uint16_t*>(block) + from, hjd, T_, hjd);
    else
      widen_cols(out.f32() + at, H_ * d_, static_cast<const uint16_t*>(block) + from, hjd, T_, hjd);
  }
}

}  // namespace dit::detail
