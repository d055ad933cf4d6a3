// The distributed TensorParallel (runtime/tensor_parallel.h) over one process group: the
// mesh's tp group for a transformer, its mp group for a text encoder. Megatron sequence
// parallelism switches on for a prepared shape when batch × tokens >= sp_min_tokens (and
// allow_sequence_parallel): Row linears then reduce-scatter over the tokens (an all-to-all of
// the row blocks and a sum in rank order; Gloo 0.5 has no reduce-scatter with timeouts) and
// gather() all-gathers the residual shards.
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/process_group.h"
#include "runtime/tensor_parallel.h"

namespace dit {

std::unique_ptr<TensorParallel> make_distributed_tensor_parallel(ProcessGroup& group, int64_t sp_min_tokens,
                                                                 bool allow_sequence_parallel);

}  // namespace dit
