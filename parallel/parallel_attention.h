// Sequence-parallel self-attention: the tokens of a sequence are split across the ranks
// of a sequence-parallel group (runtime/token_split.h) and attention is computed
// exactly, as if one process held them all.
//
//  - Ulysses (the `ulysses` group, U ranks): an all-to-all of Q, K and V turns the token
//    split into a head split (rank u gets heads split_tokens(H, U, u) of all the group's
//    tokens: H/U each, or one more for the first H mod U ranks when U does not divide H),
//    attention runs on full-length heads, a second all-to-all turns it back (on one machine,
//    in one chunk: through the ranks' shared-memory windows instead, the QKV projection
//    writing where the others read: qkv_destination(), ulysses_window.cpp). Without a ring
//    the heads go in `ulysses_chunks` chunks, pipelined: every chunk's Q, K, V are posted at
//    once (point to point, chunk 0 first on every link); chunk c is computed as soon as it
//    has arrived and its outputs are sent back at once, so chunk c+1's inputs and chunk c's
//    outputs travel while chunk c+1 is computed. Only the first chunk's scatter and the last
//    chunk's return are exposed (docs/overlap.md).
//  - Ring (the `ring` group, R ranks): every rank keeps its queries; K/V blocks (K and V dense
//    [B, H, tokens, d] in the compute type, converted once by their owner) travel round the
//    ring, each send/receive posted before computing on the current block (double buffered),
//    and each query row's online softmax (running max, sum and unnormalised output, in f32)
//    carries on from block to block (Attention::run_dense_part). On one machine the
//    blocks do not travel: each lies in its owner's shared-memory window and the others read
//    it in place (ProcessGroup::ensure_window), in the same order, so with the same bits.
//  - USP: both — Ulysses inside, Ring across (xDiT's layout: Ulysses ranks contiguous).
//  - With a ring (Ring or USP), given the whole sequence-parallel group `sp` (the mesh's sp
//    group: ring × ulysses, rank s = ring_rank · U + ulysses_rank) and at least as many heads
//    as its ranks: when that group is on one machine, its attention runs as Ulysses over all
//    of it through its windows, the tasks shared (ulysses_window.cpp), as Ulysses alone does.
//    There the ring's passes would only add synchronisation: each of its R steps waits for
//    one rank's block, and a rank slowed by its core's neighbours cannot be helped. The tokens
//    are split as the layout says either way; across machines (the group's windows refused)
//    the layout runs as above.
//
//   auto attn = make_sequence_parallel_attention(ulysses_group, ring_group, chunks, sp_group);
//   SelfAttentionShape s;
//   s.batch = 2;  s.local_tokens = T_r;  s.total_tokens = N;  s.heads = H;  s.head_dim = d;
//   attn->prepare(s);
//   attn->forward(qkv, out);   // every rank of both groups, same order
//
// Sequence-parallel rank s = ring_rank · U + ulysses_rank owns split_tokens(N, R·U, s).
// forward() allocates nothing and creates no oneDNN primitive.
#pragma once

#include <memory>

#include "parallel/process_group.h"
#include "runtime/attention_roles.h"

namespace dit {

// Heads per Ulysses rank go in at most this many chunks (fewer when a rank has fewer heads).
// 1: no pipelining. Every rank of a group must use the same value. dit-gen's default across
// machines (parallel/distributed_context.h: ulysses_chunks_for).
constexpr int kDefaultUlyssesChunks = 4;

// Groups of size 1 switch that axis off. Throws at prepare() when there are fewer heads
// than Ulysses ranks. sp: null, or the whole sequence-parallel group (its size U · R, its
// rank as above).
std::unique_ptr<SelfAttention> make_sequence_parallel_attention(std::shared_ptr<ProcessGroup> ulysses,
                                                                std::shared_ptr<ProcessGroup> ring,
                                                                int ulysses_chunks = kDefaultUlyssesChunks,
                                                                std::shared_ptr<ProcessGroup> sp = nullptr);

}  // namespace dit
