// The ParallelContext of a parallel run (runtime/parallel_context.h), over the device mesh:
//  - CfgSplit: cfg rank 0 computes the first half of the guidance batch, cfg rank 1 the
//    second; the halves' noise predictions meet by an all-gather over the CFG pair.
//  - SequenceSplit: sp rank s's attention covers tokens split_tokens(N, sp_degree, s); its
//    tensor-parallel ranks each output a share of them; the per-token outputs are all-gathered
//    once per step (model-parallel group) so every rank steps the sampler on identical full
//    latents.
//  - LayerContext: self-attention is parallel/'s Ulysses / Ring / USP over the mesh's groups
//    (local when the SP degree is 1); cross-attention is local; tensor parallelism is
//    parallel/tensor_parallel.h over the tp group (transformer) or the mp group (text encoder).
//  - Rank 0 of the replica decodes and writes the output.
#pragma once

#include <memory>

#include "parallel/parallel_attention.h"
#include "runtime/parallel_context.h"

namespace dit {

class DeviceMesh;
struct LaunchEnv;

struct DistributedOptions {
  // Megatron sequence parallelism in the transformer's tensor-parallel regions from this many
  // tokens × batch per TP group on (--sp-min-tokens; chosen from measurements, README).
  int64_t sp_min_tokens = kDefaultSpMinTokens;
  static constexpr int64_t kDefaultSpMinTokens = 512;  // measured: README "PixArt, tensor parallelism and memory"
  // Ulysses: heads per rank pipelined in up to this many chunks (--ulysses-chunks; 1: no overlap);
  // see ulysses_chunks_for.
  int ulysses_chunks = 1;
  // --parallel-vae: every rank of a replica decodes a band of the image's rows (each holds
  // the decoder); otherwise the output rank decodes alone with its machine's idle cores.
  bool parallel_vae = false;
};

// --ulysses-chunks as given (> 0), else its default: kDefaultUlyssesChunks when the ranks span
// machines (transfers then cross a network while the cores compute), 1 on one machine (the
// kernel copies loopback traffic on the same cores, and smaller chunks only add calls):
// measured in docs/overlap.md.
int ulysses_chunks_for(const LaunchEnv& env, int requested);

std::shared_ptr<ParallelContext> make_distributed_context(std::shared_ptr<DeviceMesh> mesh,
                                                          const DistributedOptions& opt = {});

}  // namespace dit
