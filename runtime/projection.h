// A linear projection over this rank's token rows, y = x·Wᵀ + b written (not added), as a model
// asks its LayerContext for it (runtime/parallel_context.h): a self-attention's Q, K and V, the
// outputs of several weights side by side in a row.
//
//   ProjectionParts p;
//   p.shape = {B, T, D, 3 * D, input, output};
//   p.whole = {&q, &k, &v};               // or {&qkv}; empty under tensor parallelism
//   p.local = std::make_unique<MyQkv>(...);  // the model's own form over its B × T rows
//   auto proj = ctx.layers().projection(std::move(p));
//   proj->run(x, y);     // every rank of the model alike, also one without rows (T = 0)
//
// The local form is the model's own. Where the ranks of a replica share a machine's memory, the
// distributed context may instead share the rows' blocks among them
// (parallel/shared_projection.h), with linears of its own over the whole weight (one weight:
// with several, each rank runs its own rows). Each row's
// result is the same whoever computes it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/linear.h"

namespace dit {

struct ProjectionShape {
  int64_t batch = 1, rows = 0;  // this rank's token rows per batch element (0: none)
  int64_t in = 0, out = 0;      // features of a row: x [.., in], y [.., out]
  DType input = DType::F32, output = DType::F32;  // x's and y's types
};

class Projection {
 public:
  virtual ~Projection() = default;
  // x [batch, rows, in] in shape.input, y [batch, rows, out] in shape.output (both may be null
  // with no rows).
  virtual void run(const void* x, void* y) = 0;
};

struct ProjectionParts {
  ProjectionShape shape;
  // The whole weights with their compute type, when this rank holds all of them (no tensor
  // parallelism): each [out_i, in] with Σ out_i = out, their outputs side by side in a row in
  // this order. Must outlive the projection. Empty otherwise.
  std::vector<const LinearWeight*> whole;
  // The local form over this rank's rows (it runs nothing where there are none).
  std::unique_ptr<Projection> local;
};

}  // namespace dit
