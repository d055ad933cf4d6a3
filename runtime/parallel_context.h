// How one model replica's work is spread over ranks, as a model and the pipeline see it.
// Three parts, each an interface with a serial implementation here (make_serial_context) and
// a distributed one over the device mesh in parallel/ (parallel/distributed_context.h):
//
//  - SequenceSplit: which of the N image tokens this rank computes, and the gather of the
//    per-token outputs so every rank steps the sampler on the same full latents.
//  - CfgSplit: which classifier-free-guidance half of the batch this rank computes, and the
//    exchange of the two halves' noise predictions.
//  - LayerContext: per-layer implementations of the attention roles (runtime/attention_roles.h):
//    self-attention over the split image tokens (local, Ulysses, Ring or USP), cross-attention
//    of the local image tokens to replicated text tokens (local everywhere: no communication).
//    A joint-attention role (image tokens split, a replicated text prefix, as SD3/Flux need),
//    tensor-parallel linears, the blocks' Q, K, V projection and feed-forward are further
//    factory methods here.
//
// A model asks its LayerContext for its attention objects in prepare() and never learns
// whether they are local or talk to other ranks.
//
//   auto ctx = make_serial_context();                      // or make_distributed_context(mesh)
//   TokenRange mine = ctx->sequence().range(N);            // all N when serial
//   auto attn = ctx->layers().self_attention();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/attention_roles.h"
#include "runtime/feed_forward.h"
#include "runtime/projection.h"
#include "runtime/row_split.h"
#include "runtime/tensor_parallel.h"
#include "runtime/token_split.h"

namespace dit {

class SequenceSplit {
 public:
  virtual ~SequenceSplit() = default;
  // Tokens of an N-token sequence this rank's attention covers (contiguous; all when serial).
  virtual TokenRange range(int64_t tokens) const = 0;
  // Tokens whose output this rank computes: range(), split again over the tensor-parallel
  // ranks (each computes the model's last layer for its share). range() without TP.
  virtual TokenRange output_range(int64_t tokens) const = 0;
  // Once per shape before the loop: buffers for gather().
  virtual void prepare(int64_t batch, int64_t tokens, int64_t row) = 0;
  // local [batch, output_range.size(), row] -> full [batch, tokens, row] on every rank.
  virtual void gather(const float* local, float* full) = 0;
};

class CfgSplit {
 public:
  virtual ~CfgSplit() = default;
  // The half of the guidance batch computed here: -1 = both (one batch holding the two
  // halves), 0 = the first half, 1 = the second (the model family says which half is the
  // conditional one).
  virtual int branch() const = 0;
  virtual void prepare(int64_t elems) = 0;
  // With a split: this rank's half [elems] -> both halves [2, elems], first half first.
  virtual void exchange(const float* mine, float* both) = 0;
};

// Which ranks split a model's weights: the transformer over the tensor-parallel ranks; a text
// encoder over every model-parallel rank of its guidance half (sequence- and tensor-parallel
// ranks alike), so its work is not duplicated there.
enum class TpScope { Transformer, TextEncoder };

class LayerContext {
 public:
  virtual ~LayerContext() = default;
  virtual std::unique_ptr<SelfAttention> self_attention() = 0;
  virtual std::unique_ptr<CrossAttention> cross_attention() = 0;
  // Over more ranks than `max_ranks` (say, a text encoder with fewer heads than the group has
  // ranks) the weights are not split: every rank runs all of it.
  virtual std::unique_ptr<TensorParallel> tensor_parallel(TpScope scope, int64_t max_ranks = 1 << 30) = 0;
  // A block's feed-forward (runtime/feed_forward.h), asked for by every rank of the model alike
  // (also one without token rows), in the same order: the local form, or rows shared among the
  // ranks of a machine (parallel/shared_feed_forward.h, parallel/shared_rows.h).
  virtual std::unique_ptr<FeedForward> feed_forward(FeedForwardParts parts) {
    return make_local_feed_forward(std::move(parts));
  }
  // A block's Q, K, V projection (runtime/projection.h), asked for as the feed-forward is: the
  // model's local form, or rows shared among the ranks of a machine (parallel/shared_projection.h).
  virtual std::unique_ptr<Projection> projection(ProjectionParts parts) { return std::move(parts.local); }
};

// What the layout printout names: the image tokens, the attention heads and FFN columns of
// the transformer, the text encoder's vocabulary (0: none), and the guidance halves' names in
// batch order (e.g. {"cond", "uncond"}).
struct LayoutInfo {
  int64_t tokens = 0;
  int heads = 0;
  int64_t ffn = 0;
  int64_t vocab = 0;
  const char* halves[2] = {"cond", "uncond"};
};

class ParallelContext {
 public:
  virtual ~ParallelContext() = default;
  virtual SequenceSplit& sequence() = 0;
  virtual CfgSplit& cfg() = 0;
  virtual LayerContext& layers() = 0;
  // Whether this rank decodes and writes the output (one rank per replica).
  virtual bool is_output_rank() const = 0;
  // The work after the loop (the VAE decode). Every rank of the replica calls it at the same
  // point. Either fn(nullptr) runs on the output rank, or fn(split) runs on each rank that
  // decodes a band of the rows (runtime/row_split.h; --vae-parallel: one rank per machine or
  // every rank). A decoding rank may use the cores of the replica's other ranks on its machine
  // meanwhile (they wait).
  virtual void run_output(const std::function<void(RowSplit*)>& fn) = 0;
  // How many bands run_output splits an image's rows into (1: not split).
  virtual int decode_parts() const = 0;
  // Makes every rank of the replica agree that `x` is identical (cheap checksum); throws if not.
  virtual void check_agreement(const float* x, int64_t n) = 0;
  // One line describing this rank's share ("serial (1 process)", "rank 3: uncond branch, ...").
  virtual std::string describe(const LayoutInfo& info) const = 0;
};

std::shared_ptr<ParallelContext> make_serial_context();

}  // namespace dit
