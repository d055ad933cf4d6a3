// The ParallelContext of a parallel run (runtime/parallel_context.h), over the device mesh:
//  - CfgSplit: cfg rank 0 computes the first half of the guidance batch, cfg rank 1 the
//    second; the halves' noise predictions meet by an all-gather over the CFG pair.
//  - SequenceSplit: sp rank s's attention covers tokens split_tokens(N, sp_degree, s); its
//    tensor-parallel ranks each output a share of them; the per-token outputs are all-gathered
//    once per step (model-parallel group) so every rank steps the sampler on identical full
//    latents.
//  - LayerContext: self-attention is parallel/'s Ulysses / Ring / USP over the mesh's groups
//    (local when the SP degree is 1); cross-attention is local; tensor parallelism is
//    parallel/tensor_parallel.h over the tp group (transformer) or the mp group (text encoder);
//    the blocks' feed-forward (and, under sequence parallelism, their Q, K, V projection)
//    share their rows over the replica group where they can (parallel/shared_rows.h).
//  - Rank 0 of the replica decodes and writes the output.
#pragma once

#include <memory>

#include "parallel/parallel_attention.h"
#include "parallel/shared_rows.h"
#include "runtime/parallel_context.h"

namespace dit {

class DeviceMesh;
struct LaunchEnv;

// Who decodes a replica's image: the output rank alone, with the cores of the replica's ranks
// on its machine (Off); one rank per machine, each a band of rows with its machine's cores
// (Machines: the same as Off when the replica is on one machine); every rank, a band each on
// its own cores (Ranks).
enum class VaeParallel { Off, Machines, Ranks };
VaeParallel parse_vae_parallel(const std::string& v);  // "off" | "machines" | "ranks"; throws otherwise

struct DistributedOptions {
  // Megatron sequence parallelism in the transformer's tensor-parallel regions from this many
  // tokens × batch per TP group on (--sp-min-tokens; chosen from measurements, README).
  int64_t sp_min_tokens = kDefaultSpMinTokens;
  static constexpr int64_t kDefaultSpMinTokens = 512;  // measured: README "PixArt, tensor parallelism and memory"
  // Ulysses: heads per rank pipelined in up to this many chunks (--ulysses-chunks; 1: no overlap);
  // see ulysses_chunks_for.
  int ulysses_chunks = 1;
  // --share-rows: the blocks' feed-forward (and, under sequence parallelism, Q, K, V
  // projection) rows shared among the replica's ranks on one machine (parallel/shared_rows.h).
  ShareRows share_rows = ShareRows::Auto;
  // --vae-parallel: how a replica's VAE decode is spread (docs/vae.md §5).
  VaeParallel vae_parallel = VaeParallel::Machines;
};

// --ulysses-chunks as given (> 0), else its default: kDefaultUlyssesChunks when the ranks span
// machines (transfers then cross a network while the cores compute), 1 on one machine (the
// kernel copies loopback traffic on the same cores, and smaller chunks only add calls):
// measured in docs/overlap.md.
int ulysses_chunks_for(const LaunchEnv& env, int requested);

std::shared_ptr<ParallelContext> make_distributed_context(std::shared_ptr<DeviceMesh> mesh,
                                                          const DistributedOptions& opt = {});

}  // namespace dit
