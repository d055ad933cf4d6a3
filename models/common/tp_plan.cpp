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
  const Tensor w = s.in_place(wn, compute) ? s.get_as(wn, compute, {out, in}) : s.get(wn, {out, in});
  const Tensor b = bias ? s.get(name + ".bias", {out}) : Tensor();
  const TpRule* rule = find_rule(plan, name);
  ShardedLinear sl;
  const PackedSource packed = s.packed_source(wn, compute);  // the matmul's layout, where the cache keeps it
  if (!rule || rule->split == Split::Replicated) {
    sl.w = LinearWeight::prepare(w, b, compute);
    sl.w.packed = packed;
    return sl;
  }
  sl.split = rule->split;
  const int64_t unit = rule->unit == TpUnit::Heads ? head_dim : 1;
  auto shard_key = [&](const char* dim, TokenRange r) {
    PackedSource p = packed;
    if (p) p.key += std::string("|") + dim + " " + std::to_string(r.begin) + ":" + std::to_string(r.end);
    return p;
  };
  if (rule->split == Split::Row) {
    const TokenRange cols = tp.shard(in, unit);
    sl.w = shard_cols(w, b, compute, cols);
    sl.w.packed = shard_key("cols", cols);
  } else {
    const TokenRange rows = tp.shard(out, unit);
    sl.w = shard_rows(w, b, compute, rows);
    sl.w.packed = shard_key("rows", rows);
    // A part of the rows: copied, like the column shards. The ranks' shards are disjoint, so
    // nothing that could be shared is copied, and a rank's memory is exactly its shard (reading
    // a view in place also maps the file pages around it).
    if (rows.size() < out && sl.w.weight.data() >= w.data() &&
        static_cast<const char*>(sl.w.weight.data()) < static_cast<const char*>(w.data()) + w.nbytes())
      sl.w.weight = sl.w.weight.clone();
  }
  // A copied shard (columns, rows, or converted to the compute type) no longer needs the
  // checkpoint's pages it was read from: give them back, so a rank's resident memory is its
  // shard (RSS as if the ranks ran on separate machines).
  const char* src = static_cast<const char*>(w.data());
  const char* got = static_cast<const char*>(sl.w.weight.data());
  if (got < src || got >= src + w.nbytes()) s.drop(w);
  return sl;
}

}  // namespace dit
