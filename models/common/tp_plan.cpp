#include "models/common/tp_plan.h"

#include <cctype>

#include "runtime/error.h"
#include "runtime/safetensors.h"
#include "runtime/weight_shard.h"

namespace dit {

namespace {

// '*' matches one or more digits; everything else literally.
bool matches(const std::string& pattern, const std::string& name) {
  size_t p = 0, n = 0;
  while (p < pattern.size() && n < name.size()) {
    if (pattern[p] == '*') {
      if (!std::isdigit(static_cast<unsigned char>(name[n]))) return false;
      while (n < name.size() && std::isdigit(static_cast<unsigned char>(name[n]))) ++n;
      ++p;
    } else if (pattern[p++] != name[n++]) {
      return false;
    }
  }
  return p == pattern.size() && n == name.size();
}

}  // namespace

const TpRule* find_rule(const TpPlan& plan, const std::string& name) {
  for (const TpRule& r : plan)
    if (matches(r.pattern, name)) return &r;
  return nullptr;
}

ShardedLinear load_linear(const WeightStore& s, const std::string& name, int64_t out, int64_t in, DType compute,
                          const TpPlan& plan, const TensorParallel& tp, int64_t head_dim, bool bias) {
  // In the compute type when that is a view (stored so, or in the converted-weight cache);
  // else as stored, so that a shard converts its own part only.
  const std::string wn = name + ".weight";
  const bool mapped = s.in_place(wn, compute);
  const Tensor w = mapped ? s.get_as(wn, compute, {out, in}) : s.get(wn, {out, in});
  const Tensor b = bias ? s.get(name + ".bias", {out}) : Tensor();
  const TpRule* rule = find_rule(plan, name);
  // The matmul's layout from the weight cache (runtime/packed_weights.h) where the weight stays
  // a view of the mapping: its pages are read once to pack it and not again, so the entry adds
  // no memory. A private copy (a conversion) is read as it is: packing it would keep both.
  const PackedSource packed = mapped ? s.packed_source(wn, compute) : PackedSource{};
  ShardedLinear sl;
  TokenRange rows{0, out}, cols{0, in};
  if (!rule || rule->split == Split::Replicated) {
    sl.w = LinearWeight::prepare(w, b, compute);  // a view when mapped
  } else {
    sl.split = rule->split;
    const int64_t unit = rule->unit == TpUnit::Heads ? head_dim : 1;
    if (rule->split == Split::Row) {
      cols = tp.shard(in, unit);  // a strided view when it will be packed, else a copy
      sl.w = packed ? shard_cols_view(w, b, compute, cols) : shard_cols(w, b, compute, cols);
    } else {
      rows = tp.shard(out, unit);
      sl.w = shard_rows(w, b, compute, rows);  // a view
    }
  }
  auto in_w = [&](const Tensor& t) {  // a view into w (not a copy)
    const char* p = static_cast<const char*>(t.data());
    return p >= static_cast<const char*>(w.data()) && p < static_cast<const char*>(w.data()) + w.nbytes();
  };
  const bool view = in_w(sl.w.weight);
  auto range = [](TokenRange r) { return std::to_string(r.begin) + ":" + std::to_string(r.end); };
  if (view && packed) {  // packed from the view, a part of the rows or columns under its own key
    sl.w.packed = packed;
    sl.w.packed.release_plain = s.releaser(sl.w.weight);
    if (rows.size() < out) sl.w.packed.key += "|rows " + range(rows);
    if (cols.size() < in) sl.w.packed.key += "|cols " + range(cols);
  } else if (view && rows.size() < out) {
    // A part of the rows, not packed: copied, like the column shards. The ranks' shards are
    // disjoint, so nothing that could be shared is copied, and a rank's memory is exactly its
    // shard (reading a view in place also maps the file pages around it).
    sl.w.weight = sl.w.weight.clone();
  }
  // A copy (a shard of columns or rows, or the weight converted to the compute type) no longer
  // needs the checkpoint's pages it was read from: give them back, so a rank's resident memory
  // is its shard (RSS as if the ranks ran on separate machines).
  if (!in_w(sl.w.weight)) s.drop(w);
  return sl;
}

std::unique_ptr<ParallelLinear> block_linear(TensorParallel& tp, const ShardedLinear& sl, const BlockLinearShape& s) {
  LinearSpec spec;
  spec.batch = s.batch;
  spec.rows = s.rows;
  spec.in = s.in;
  spec.out = s.out;
  spec.gated_residual = s.gated;
  spec.accumulate = s.accumulate;
  spec.input = s.input;
  return tp.linear(sl.split, spec, sl.w);
}

}  // namespace dit
