// The ParallelContext of a parallel run (runtime/parallel_context.h), over the device mesh:
//  - CfgSplit: cfg rank 0 computes the first half of the guidance batch, cfg rank 1 the
//    second; the halves' noise predictions meet by an all-gather over the CFG pair.
//  - SequenceSplit: sp rank s computes tokens split_tokens(N, sp_degree, s); the per-token
//    outputs are all-gathered once per step so every rank steps the sampler on identical
//    full latents.
//  - LayerContext: self-attention is parallel/'s Ulysses / Ring / USP over the mesh's groups
//    (local when the SP degree is 1); cross-attention is local.
//  - Rank 0 of the replica decodes and writes the output.
#pragma once

#include <memory>

#include "runtime/parallel_context.h"

namespace dit {

class DeviceMesh;

std::shared_ptr<ParallelContext> make_distributed_context(std::shared_ptr<DeviceMesh> mesh);

}  // namespace dit
