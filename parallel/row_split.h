// The rows of an image split over the ranks of a process group (runtime/row_split.h): the
// VAE decode under --vae-parallel, one band of rows per rank (or machine) of a replica. Halo rows travel
// point to point between neighbouring ranks, GroupNorm's sums are all-gathered and added in
// rank order (the same bits on every rank), and gathers are Gloo all-gathers.
//
//   auto split = make_row_split(mesh.group_ref(Group::Replica));
//   vae.prepare(1, h, w, split.get());   // every rank of the group, then vae.decode(...)
#pragma once

#include <memory>

#include "runtime/row_split.h"

namespace dit {

class ProcessGroup;

std::unique_ptr<RowSplit> make_row_split(std::shared_ptr<ProcessGroup> group);

}  // namespace dit
