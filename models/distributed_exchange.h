// The StepExchange of a parallel run, over parallel/'s device mesh:
//  - CFG parallel: cfg rank 0 computes the conditional branch, cfg rank 1 the
//    unconditional one; their noise predictions meet by an all-gather over the CFG pair.
//  - Sequence parallel (Ulysses × Ring): sp rank s computes tokens split_tokens(N, P, s);
//    attention is parallel/'s Ulysses / Ring / USP; the token outputs are all-gathered
//    once per step so every rank steps the sampler on identical full latents.
//  - Rank 0 of the replica decodes and writes the output.
#pragma once

#include <memory>

#include "models/step_exchange.h"

namespace dit {

class DeviceMesh;

std::shared_ptr<StepExchange> make_distributed_exchange(std::shared_ptr<DeviceMesh> mesh);

}  // namespace dit
