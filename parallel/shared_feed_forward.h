// The blocks' feed-forward with its token rows shared among the ranks of a replica that are on
// one machine (runtime/feed_forward.h; how rows are shared: parallel/shared_rows.h). A task
// runs fc1 over its rows into a block of hidden rows, then fc2 with the gated residual into x's
// rows in the owner's window.
#pragma once

#include <memory>

#include "parallel/shared_rows.h"
#include "runtime/feed_forward.h"

namespace dit {

// The shared form of `parts`' feed-forward, or the local form when it cannot be shared (the
// same answer on every rank of the group: a group of one, no whole weights, no window, off).
// Collective over the group (RowSharing::plan) where the mode and the group allow sharing:
// every rank makes its feed-forwards and projections in the same order.
std::unique_ptr<FeedForward> make_shared_feed_forward(const std::shared_ptr<RowSharing>& sharing,
                                                      FeedForwardParts parts);

}  // namespace dit
