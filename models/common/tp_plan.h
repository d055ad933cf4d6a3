// Tensor-parallel plans: which weights of a model family are split how, as data — like
// PyTorch's parallelize_module plans (ColwiseParallel, RowwiseParallel). A plan is a table of
// weight-name patterns ('*' matches a block number) and splits; a weight no rule names is
// replicated. Giving a new family (SD3, Flux) tensor parallelism is writing its table.
//
//   const TpPlan plan = {{"transformer_blocks.*.ff.net.0.proj", Split::Column},
//                        {"transformer_blocks.*.ff.net.2", Split::Row}};
//   ShardedLinear fc2 = load_linear(store, "transformer_blocks.3.ff.net.2", D, 4 * D, compute, plan, *tp, head_dim);
//   auto op = tp->linear(fc2.split, spec, fc2.w);
#pragma once

#include <string>
#include <vector>

#include "runtime/linear.h"
#include "runtime/tensor_parallel.h"

namespace dit {

class WeightStore;

// How a split's features are grouped: attention heads stay whole (head_dim features each).
enum class TpUnit { Features, Heads };

struct TpRule {
  std::string pattern;  // e.g. "transformer_blocks.*.attn1.to_q"
  Split split;
  TpUnit unit = TpUnit::Features;
};
using TpPlan = std::vector<TpRule>;

// The rule naming `name` (a weight's prefix, without ".weight"), or null (replicated).
const TpRule* find_rule(const TpPlan& plan, const std::string& name);

struct ShardedLinear {
  LinearWeight w;
  Split split = Split::Replicated;
};

// Loads <name>.weight [out, in] and <name>.bias [out] (when `bias`) as this rank's shard under
// `plan`: Column and ColumnGather keep rows tp.shard(out, unit) (a view into the checkpoint),
// Row keeps columns tp.shard(in, unit) (copied once; the bias whole), Replicated all of it.
// The unit of TpUnit::Heads is head_dim.
ShardedLinear load_linear(const WeightStore& s, const std::string& name, int64_t out, int64_t in, DType compute,
                          const TpPlan& plan, const TensorParallel& tp, int64_t head_dim, bool bias = true);

// A block's tensor-parallel layer over `rows` token rows of `batch` items: the full shape
// (in -> out features) in the spec, this rank's shard in the weight; with `gated`, y += gate ⊙
// (x·Wᵀ + b) (a [batch, out] gate per item), with `accumulate`, y += x·Wᵀ + b; x in `input`.
struct BlockLinearShape {
  int64_t batch = 1, rows = 0, in = 0, out = 0;
  bool gated = false, accumulate = false;
  DType input = DType::F32;
};
std::unique_ptr<ParallelLinear> block_linear(TensorParallel& tp, const ShardedLinear& sl, const BlockLinearShape& s);

}  // namespace dit
