// The distributed TensorParallel (runtime/tensor_parallel.h) over one process group: the
// mesh's tp group for a transformer, its mp group for a text encoder. Megatron sequence
// parallelism switches on for a prepared shape when batch × tokens >= sp_min_tokens (and
// allow_sequence_parallel): Row linears then reduce-scatter over the token rows of every batch
// item (ProcessGroup::reduce_scatter_sum_v, summed in rank order) and gather() all-gathers the
// residual shards into place (the strided all_gather_v).
#pragma once

#include <cstdint>
#include <memory>

#include "parallel/process_group.h"
#include "runtime/tensor_parallel.h"

namespace dit {

std::unique_ptr<TensorParallel> make_distributed_tensor_parallel(ProcessGroup& group, int64_t sp_min_tokens,
                                                                 bool allow_sequence_parallel);

}  // namespace dit
