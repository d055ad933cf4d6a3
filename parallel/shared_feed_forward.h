// The blocks' feed-forward with its token rows shared among the ranks of a replica that are on
// one machine (runtime/feed_forward.h; the attention's tasks are shared the same way,
// parallel/ulysses_window.cpp).
//
// Every rank does the same arithmetic on its own rows, yet ranks finish at different times: the
// cores of a virtual machine run at different speeds (vCPUs sharing a host core), a machine is
// busy with other work. The feed-forward is two thirds of a block's linear arithmetic and
// row by row, so here it is split into tasks of `block` rows of one batch element; each rank
// copies its rows (h, the residual x, the gate) into its shared-memory window, takes its own
// tasks one at a time from a counter there, then those left in the other ranks' windows,
// computing them with linears of its own over the same whole weights and writing x's rows in
// their windows. A rank waits only for tasks of its own that another rank has taken, then
// copies x back.
//
//   one use of the group's window per block:
//   window_begin -> h, x, gate, header, counters -> publish -> my tasks -> each other rank's,
//   once it has published -> until mine are all finished -> x back -> release
//
// Each row's bits are the same whoever computes it: the same kernels over the same values
// (a matmul's row does not depend on how many rows it is given; tested). Off the window (the
// replica spans machines, or windows are turned off), under tensor parallelism and, with
// --share-ffn auto, with more than kAutoShareMaxThreads threads a rank, the local form runs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/feed_forward.h"

namespace dit {

class ProcessGroup;

// --share-ffn: on (shared wherever it can be, and a warning where it cannot), off (always
// local), auto (as on where the ranks have at most kAutoShareMaxThreads threads each, else
// off). With one thread a rank, a core slower than the others slows its whole rank (the
// eighteenth session measured the same linears 1.5-2.6x apart on the 16-core machine); with
// many, a rank's speed is its cores' average and its layouts were within 0.97-1.04x of one
// process without sharing, while its tasks would be coarse (512 rows and more) and unmeasured.
enum class ShareFfn { Auto, On, Off };
constexpr int kAutoShareMaxThreads = 4;
ShareFfn parse_share_ffn(const std::string& v);  // "auto" | "on" | "off"; throws otherwise
// Whether `mode` shares the rows of ranks with `threads` threads each (the most of any rank),
// where the weights, the machine and the windows allow it.
bool share_ffn_wanted(ShareFfn mode, int threads);

// What the feed-forwards a context makes share: the group, its window's layout for the
// prepared shape, the block of hidden rows a task uses. Made once per context.
// `before_own_task` (tests: a slow rank) runs before each task a rank takes from its own window.
class FeedForwardSharing;
std::shared_ptr<FeedForwardSharing> make_feed_forward_sharing(std::shared_ptr<ProcessGroup> group, ShareFfn mode,
                                                              std::function<void()> before_own_task = {});
// Rows of other ranks' tasks this rank has computed through `sharing`.
uint64_t rows_for_others(const FeedForwardSharing& sharing);

// The shared form of `parts`' feed-forward, or the local form when it cannot be shared (the
// same answer on every rank of the group: a group of one, no whole weights, no window, off).
// Collective over the group (an all-gather of each rank's rows, the window's size) where the
// mode and the group allow sharing: every rank makes its feed-forwards in the same order.
std::unique_ptr<FeedForward> make_shared_feed_forward(const std::shared_ptr<FeedForwardSharing>& sharing,
                                                      FeedForwardParts parts);

}  // namespace dit
