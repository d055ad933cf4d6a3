// The blocks' Q, K, V projection with its token rows shared among the ranks of a replica that
// are on one machine (runtime/projection.h; how rows are shared: parallel/shared_rows.h). A
// task runs each whole weight over its rows into its columns of the output rows (the owner's
// own, or in its window when another rank computes them). The distributed context shares it
// only under sequence parallelism: there it is the linear work before the attention's
// exchange, where a slow rank would hold the others up; without, the feed-forward's sharing
// later in the block absorbs it.
#pragma once

#include <memory>

#include "parallel/shared_rows.h"
#include "runtime/projection.h"

namespace dit {

// The shared form of `parts`' projection, or its local form when it cannot be shared (the same
// answer on every rank of the group). Collective as make_shared_feed_forward.
std::unique_ptr<Projection> make_shared_projection(const std::shared_ptr<RowSharing>& sharing,
                                                   ProjectionParts parts);

}  // namespace dit
