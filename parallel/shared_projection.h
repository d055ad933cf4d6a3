// The blocks' Q, K, V projection with its token rows shared among the ranks of a replica that
// are on one machine (runtime/projection.h; how rows are shared: parallel/shared_rows.h). A
// task runs the whole weight (Q, K and V stacked into one) over its rows into the output rows
// (the owner's own, or in its window when another rank computes them). Given three weights (Q,
// K and V read in place without the weight cache) the local form runs: their strided output's
// kernel gives a row other bits in tasks of other sizes.
#pragma once

#include <memory>

#include "parallel/mesh.h"
#include "parallel/shared_rows.h"
#include "runtime/projection.h"

namespace dit {

// Whether a layout's ranks share the projection's rows (where rows can be shared at all): only
// under sequence parallelism. There it is the linear work before the attention's exchange,
// where a slow rank would hold the others up. Without (guidance halves only) the feed-forward's
// sharing later in the block absorbs a slow rank's projection, and a second use of the window a
// block measured 5-7% slower on the 2-core VM with a core slowed (docs/benchmarks.md). Under
// sequence parallelism its window use runs inside the attention's, so the replica group needs a
// window of its own there (DeviceMesh).
inline bool shares_projection(const MeshDegrees& d) { return d.sp() > 1; }

// The shared form of `parts`' projection, or its local form when it cannot be shared (the same
// answer on every rank of the group). Collective as make_shared_feed_forward.
std::unique_ptr<Projection> make_shared_projection(const std::shared_ptr<RowSharing>& sharing,
                                                   ProjectionParts parts);

}  // namespace dit
