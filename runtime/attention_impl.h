// Attention's private state (runtime/attention.h), shared by its two halves:
// attention_setup.cpp (the constructor: blocks, layouts, primitives, threads' buffers) and
// attention.cpp (the runs over the blocks). Not for other users.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/attention.h"
#include "runtime/engine.h"

namespace dit {
namespace attention_detail {

using dnnl::memory;

// One block matmul shape (rows of Q × columns of K) for Q·Kᵀ and for P·V.
struct BlockPrims {
  dnnl::matmul qk, pv;
  memory::desc qk_src, qk_wei, qk_dst, pv_src, pv_wei, pv_dst;
  memory::desc qk_sp, pv_sp;
  std::string impl;  // the oneDNN implementations chosen, for impl_info()
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
  // Q·Kᵀ over a padded head_dim from unpadded planes (run_dense): the block's rows of q [QB, Dqk]
  // and k [KB, Dqk], the pad zeroed once, only the first head_dim of each row written per block.
  uint16_t* qpad = nullptr;
  uint16_t* kpad = nullptr;
  AttentionPhases phases;
};

// rows of D bf16 values, src_stride apart, into rows dst_stride apart (attention_dense.cpp).
void copy_rows_bf16(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride, int64_t rows,
                    int64_t D);

}  // namespace attention_detail

using attention_detail::BlockPrims;
using attention_detail::ThreadState;

struct Attention::Impl {
  AttentionSpec spec;
  std::string what, impl_name;
  int64_t QB = 0, KB = 0, nqb = 0, nkb = 0, q_tail = 0, kv_tail = 0;
  int64_t Dqk = 0;  // the head_dim Q·Kᵀ reduces over: the spec's, or padded (bf16_qk_pad)
  AttnLayout eq, ek, ev;  // layouts the matmuls read (user's for f32, dense bhtd bf16 copies for bf16)
  BlockPrims prims[2][2];  // [q tail?][kv tail?]
  int nthr = 1;
  std::vector<ThreadState> th;
  Tensor thread_buf, scratch_buf;
  size_t scratch_per_thread = 0, thread_floats = 0;
  Tensor qb, kb, vb;  // bf16 copies (bf16 compute only); qb and kb rows Dqk long
  double prepare_s = 0;  // wall time of the copies before the blocks (AttentionPhases::prepare)
  bool pack_kv = false;  // f32: K/V copied to dense [batch, heads, kv_len, head_dim] per run
  Tensor kd, vd;
  bool dense = false;  // the spec's q, k, v are dense bhtd: run_dense may be used
  // The scale applied by the Q·Kᵀ matmul (f32: an output scale, a multiply in registers) or by
  // the softmax (bf16: folded into its exponential, sparing the matmul a post-op; softmax_row.h);
  // the other is 1. The rows' m are maxima of the logits as S holds them.
  float qk_scale = 1, softmax_scale = 1;

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
    AttentionTaskQueue* queue = nullptr;  // null: every task, shared by the threads
    // q and k are unpadded dense planes while Dqk > head_dim (run_dense, run_dense_part): each
    // block is copied into the thread's qpad / kpad for Q·Kᵀ.
    bool pad_blocks = false;
  };
  // A task's rows: q block [q0, q0 + rows) of (batch b, head h); o0 the first row's element in
  // out, r0 its index in lse / m / l.
  struct TaskRows {
    int64_t b = 0, h = 0, q0 = 0, rows = 0, o0 = 0, r0 = 0;
  };
  void choose_blocks();
  void choose_layouts();
  void make_prims();
  void make_threads();
  void check_dense(const char* fn) const;
  void run_blocks(const BlockRun& r);
  void run_task(ThreadState& T, int64_t task, const BlockRun& r);
  void start_rows(ThreadState& T, const BlockRun& r, const TaskRows& t) const;
  void add_block_bias(ThreadState& T, const AttnBias& bias, const TaskRows& t, int64_t k0, int64_t kc) const;
  void finish_rows(ThreadState& T, const BlockRun& r, const TaskRows& t) const;
};

}  // namespace dit
