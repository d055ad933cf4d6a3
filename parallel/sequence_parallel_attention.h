// The sequence-parallel attention behind make_sequence_parallel_attention
// (parallel/parallel_attention.h): its state and the steps of its forward, for the four files
// that implement it (no model includes this):
//   parallel_attention.cpp  prepare() and forward(): shapes, kernels, buffers; the dispatch
//   ulysses_exchange.cpp    Ulysses: the all-to-alls (one chunk) or the pipelined chunks, f32 or bf16
//   ulysses_window.cpp      Ulysses in one chunk on one machine (and a ring or USP there, run as
//                           Ulysses over the whole sp group): through shared-memory windows, the
//                           attention's tasks shared by the ranks
//   ring_attention.cpp      Ring: K/V blocks as messages or in shared-memory windows, softmax carried on
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "parallel/parallel_attention.h"
#include "parallel/process_group.h"
#include "parallel/strided_block.h"
#include "runtime/attention.h"
#include "runtime/attention_roles.h"
#include "runtime/dtype.h"
#include "runtime/elementwise.h"
#include "runtime/error.h"
#include "runtime/token_split.h"

namespace dit::detail {

using Buf = std::vector<float>;

// rows × width elements from a matrix with src_stride elements per row into one with
// dst_stride (the head block of every row, out of or into [.., H·d] rows).
template <class T>
void copy_cols(T* dst, int64_t dst_stride, const T* src, int64_t src_stride, int64_t rows, int64_t width) {
  if (rows <= 0 || width <= 0) return;
  const size_t w = size_t(width);
  copy_block_parallel(src, StridedBlock{0, size_t(rows), w, size_t(src_stride)}, 0, dst,
                      StridedBlock{0, size_t(rows), w, size_t(dst_stride)}, 0, size_t(rows) * w);
}

// The same with bf16 rows (uint16_t) widened to f32: exact. Large ones (kParallelCopyBytes of
// output) are shared among the rank's threads, as copy_block_parallel's.
inline void widen_cols(float* dst, int64_t dst_stride, const uint16_t* src, int64_t src_stride, int64_t rows,
                       int64_t width) {
  parallel_for(rows, size_t(rows * width) * 4 >= kParallelCopyBytes, [&](int64_t r) {
    for (int64_t i = 0; i < width; ++i) dst[r * dst_stride + i] = bf16_to_f32(src[r * src_stride + i]);
  });
}

// The same with f32 rows rounded to bf16 (to nearest even, as f32_to_bf16).
inline void narrow_cols(uint16_t* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                        int64_t width) {
  parallel_for(rows, size_t(rows * width) * 2 >= kParallelCopyBytes,
               [&](int64_t r) { to_bf16(src + r * src_stride, dst + r * dst_stride, width); });
}

// q, k, v rows as a forward was given them: f32, or bf16 (forward(const uint16_t*); only
// where qkv_dtype() is BF16). The internal f32 buffers (chunk_qkv_) travel as f32 rows. planes:
// instead of rows, bf16 q, k and v each dense [B, heads, tokens, d], one after the other (what
// Ulysses' bf16 exchange leaves in qkv16_): the ring reads q and its K/V block from there.
struct QkvRows {
  const void* p;
  bool bf16;
  bool planes = false;
  const float* f32() const {
    DIT_CHECK(!bf16, "sequence-parallel attention: an f32 path got bf16 q, k, v");
    return static_cast<const float*>(p);
  }
  const uint16_t* b16() const { return static_cast<const uint16_t*>(p); }
};

// The output [B, T, H, d] as a forward was given it: f32, or bf16 (forward(..., uint16_t*);
// only where out_dtype() is BF16).
struct OutRows {
  void* p;
  bool bf16;
  float* f32() const {
    DIT_CHECK(!bf16, "sequence-parallel attention: an f32 path got a bf16 output");
    return static_cast<float*>(p);
  }
  uint16_t* b16() const { return static_cast<uint16_t*>(p); }
};

class SequenceParallelAttention final : public SelfAttention {
 public:
  SequenceParallelAttention(std::shared_ptr<ProcessGroup> ulysses, std::shared_ptr<ProcessGroup> ring, int chunks,
                            std::shared_ptr<ProcessGroup> sp)
      : asked_{std::move(ulysses), std::move(ring)}, sp_(std::move(sp)), chunks_wanted_(chunks) {
    DIT_CHECK(chunks >= 1, "sequence-parallel attention: " << chunks << " Ulysses chunks (at least 1)");
    use_groups(false);
    DIT_CHECK(!sp_ || (sp_->size() == U_ * R_ && sp_->rank() == r_ * U_ + u_),
              "sequence-parallel attention: the sp group (rank " << sp_->rank() << " of " << sp_->size()
                                                                 << ") is not ring x ulysses (" << R_ << " x " << U_ << ")");
  }

  const char* name() const override {
    const int U = asked_.degree(asked_.ulysses), R = asked_.degree(asked_.ring);
    return U > 1 && R > 1 ? "usp" : U > 1 ? "ulysses" : R > 1 ? "ring" : "local";
  }

  void prepare(const SelfAttentionShape& s) override;
  void forward(const float* qkv, float* out) override;
  // bf16 q, k, v where the kernels read bf16 without an f32 exchange: bf16 compute with the
  // ring alone, or with Ulysses exchanging bf16 (uly16_: an even head_dim), with or without
  // a ring (USP).
  DType qkv_dtype() const override;
  void forward(const uint16_t* qkv, float* out) override;
  // bf16 output where the other ranks' outputs already return in bf16: Ulysses exchanging
  // bf16, in one chunk or in several (with a ring: one). They land in out as they
  // arrive (one chunk) or are copied into it (chunks), and this rank's own heads are rounded
  // into it: the bits of the f32 output rounded, with no widening pass.
  DType out_dtype() const override;
  void forward(const uint16_t* qkv, uint16_t* out) override;
  // Ulysses on one machine (one chunk, windows set up): this rank's window, for the QKV
  // projection to write into (ulysses_window.cpp); else null.
  void* qkv_destination() override;

 private:
  int64_t group_tokens(int ring_rank) const {  // tokens of the Ulysses group at ring position ring_rank
    return ranges_[size_t(ring_rank * U_ + U_ - 1)].end - ranges_[size_t(ring_rank * U_)].begin;
  }
  TokenRange heads_of(int j) const { return head_ranges_[size_t(j)]; }  // Ulysses rank j's heads
  // Heads of Ulysses rank j in chunk c (absolute head indices).
  TokenRange chunk_heads(int c, int j) const { return chunk_heads_[size_t(c * U_ + j)]; }
  TokenRange tokens_of(int j) const { return ranges_[size_t(r_ * U_ + j)]; }  // Ulysses rank j's tokens
  // The groups a forward uses: those asked for, or (whole) Ulysses over the sp group.
  void use_groups(bool whole);
  void prepare_groups(const SelfAttentionShape& s);
  void prepare_ulysses();
  void prepare_ulysses_blocks();
  void free_exchange_buffers();
  void ulysses_forward(QkvRows qkv, OutRows out);
  void ulysses_all_to_all(QkvRows qkv, OutRows out);
  void scatter16(QkvRows qkv);
  // q, k, v rows [B, T, 3, H, d] of `heads` -> the kernels' planes q, k, v each dense
  // [B, heads, dst_tokens or T, d] in the compute type (bf16: rounded), the rows landing at
  // token `first` of them.
  void pack_planes(QkvRows qkv, TokenRange heads, void* dst, int64_t dst_tokens = 0, int64_t first = 0,
                   int64_t tokens = -1) const;
  void unpack_chunk16(QkvRows qkv, int c);
  void attend16(int64_t heads);
  void exchange_outputs16(uint16_t* recv);
  void gather16(float* out);
  void gather16(uint16_t* out);
  void exchange_and_attend16(QkvRows qkv);
  void narrow_tokens(int j, int64_t hcd, uint16_t* dst, bool packed) const;
  void post_scatter(QkvRows qkv, uint32_t tag0);
  void unpack_chunk(QkvRows qkv, int c);
  void post_gather_chunk(int c, OutRows out, uint32_t tag0);
  void finish_gather(OutRows out);
  // Ulysses through the group's shared-memory windows (ulysses_window.cpp).
  struct UlyssesWindowLayout {
    size_t planes_at, out_at, tasks_at, bytes;
  };
  UlyssesWindowLayout ulysses_window_layout() const;
  void ulysses_window(QkvRows qkv, OutRows out);
  void window_scatter(QkvRows qkv);
  void read_qkv_block(const void* rows, int j);
  void window_attend();
  void window_gather(OutRows out);
  void read_out_block(const float* block, int j, OutRows out);
  const Attention& window_attention(int j) const { return by_heads_.at(heads_of(j).size()); }
  void attend(QkvRows qkv_g, float* out_g, int64_t heads);
  void ring_attention(QkvRows qkv_g, float* out_g);
  void ring_attention_window(QkvRows qkv_g, float* out_g);
  const void* queries(QkvRows qkv_g);
  void attend_block(int step, const void* q, const char* kv, int64_t tj, float* out_g);
  void pack_block(QkvRows qkv_g, char* block) const;
  // Rows of q, k or v (`offset` elements into qkv, layout L: `heads` heads of `tokens` tokens)
  // in the kernels' dense form, from f32 or bf16 rows.
  void to_dense(QkvRows qkv, int64_t offset, const AttnLayout& L, int64_t heads, int64_t tokens, void* dst,
                int64_t dst_tokens = 0, int64_t first = 0) const;

  struct Asked {
    std::shared_ptr<ProcessGroup> ulysses, ring;
    static int degree(const std::shared_ptr<ProcessGroup>& g) { return g ? g->size() : 1; }
  } asked_;
  std::shared_ptr<ProcessGroup> sp_;  // null: the layout as asked, always
  // In use: as asked, or with a ring on one machine Ulysses over the whole sp group
  // (whole_group_: U_ = its size, no ring).
  std::shared_ptr<ProcessGroup> uly_, ring_;
  int U_ = 1, R_ = 1, u_ = 0, r_ = 0;
  bool whole_group_ = false;
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
  // ... and in bf16 (uly16_; with a ring too, which then reads q and its K/V block from qkv16_
  // as they are): each rank converts its q,k,v once into the
  // kernels' form per destination (send16_: for rank j, [3, B, hj, T, d] at send16_off_[j]),
  // the scatter moves half the bytes into qkv16_ ([3, B, Hu, Tg, d]: q, k and v each dense),
  // and the attention reads that as it is (run_dense): the conversion it would do, done before
  // the exchange. bf16 pairs travel as 4-byte units, so the scatter's blocks count floats:
  // every size is a multiple of d, which must be even (else the f32 exchange is used). With
  // chunks the same: each (chunk, peer) block is [3, B, hc_j, T, d] bf16 in scatter_send_'s
  // room for it, and qkv16_ holds one chunk's [3, B, hc, Tg, d].
  // The outputs return in bf16 too (out16_: chunk_out_ rounded; recv16_: [B, T, H, d], the
  // other ranks' heads, widened into an f32 out, or received straight into a bf16 out): the
  // next matmul (the output projection, in bf16) rounds its input to bf16 anyway, to nearest
  // even as to_bf16 does, so the result is the same bit for bit; this rank's own heads stay
  // f32 (or are rounded into a bf16 out). With chunks, gather_send_ and gather_recv_ hold
  // bf16 in their blocks' room, widened into an f32 out or copied into a bf16 one.
  bool uly16_ = false;
  std::vector<uint16_t> send16_, qkv16_, out16_, recv16_;
  std::vector<size_t> send16_off_;
  std::vector<StridedBlock> gather16_to_, gather16_from_;
  // Ulysses through windows (one machine, one chunk; ulysses_window.cpp). Each rank's window
  // holds, in four parts:
  //   rows:   its q, k, v rows [B, T, 3, H, d] in qkv_dtype() (written there by the projection
  //           when it asked qkv_destination(), else copied in), from which every rank reads
  //           its heads of the other ranks' tokens;
  //   planes: q, k, v of the group's tokens for its heads, each dense [B, Hu, Tg, d] in the
  //           compute type (one copy, the bf16 conversion included);
  //   out:    their attention output [B, Tg, Hu, d] f32, from which each rank reads its tokens;
  //   tasks:  two counters, the attention tasks claimed and finished.
  // Any rank computes any rank's attention tasks: each first takes its own, then what is left
  // of the others' (a rank slowed by its core's neighbours is helped instead of waited for).
  bool uly_window_ = false;
  bool qkv_in_window_ = false;  // qkv_destination() handed out the window for the next forward
  char* uly_win_ = nullptr;     // this rank's window, during a use
  size_t planes_at_ = 0, out_at_ = 0, tasks_at_ = 0;  // where the parts lie in a window (bytes)
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
  Buf kv_[2], m_acc_, l_acc_;
  int last_step_ = 0;
  uint32_t tag_ = 1;
};

}  // namespace dit::detail
