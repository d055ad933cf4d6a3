// How the replicas of a data-parallel batch (--dp D) report to rank 0, which prints the
// progress and the summary: each replica's output rank posts its finished items' records
// (and, with --progress json, its step events) to the rendezvous store under numbered keys,
// and rank 0 draws them in. An item's steps are posted before its record, so they are drawn
// first. The end of the batch travels the same way ("dit-batch-end"), because replicas may
// finish far apart, beyond any collective's timeout. Waits stop at once when another rank
// posted its failure, is no longer running, or stopped responding (its heartbeat stalled).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "models/dit_gen.h"
#include "parallel/rendezvous.h"
#include "runtime/error.h"
#include "tools/cli/batch_progress.h"
#include "tools/cli/batch_results.h"

namespace dit::cli {

// A failure that ends the whole batch (another rank failed), never recorded as an item's.
struct BatchAbort : Error {
  using Error::Error;
};

class ProgressRelay {
 public:
  // `expected[r]`: the items replica r generates. `store` null: one process.
  ProgressRelay(std::shared_ptr<RendezvousStore> store, int world, int replica, std::vector<int> expected,
                bool relay_steps);
  // A replica's output rank (not rank 0): posts a record / a step of the micro-batch `indices`.
  void post_item(const ItemRecord& r);
  void post_step(const std::vector<int>& indices, const StepInfo& st);
  // Rank 0: hands what the other replicas posted so far to `progress`.
  void poll(BatchProgress& progress);
  // Rank 0: polls until every replica's records are in; then posts whether any item failed.
  void wait_all(BatchProgress& progress);
  void post_end(bool failed);
  // The other ranks: waits for rank 0's end of the batch; returns whether any item failed.
  bool wait_end();

 private:
  void check_peers();
  std::shared_ptr<RendezvousStore> store_;
  int world_, replica_;
  std::vector<int> expected_, received_, steps_received_;
  bool relay_steps_;
  int posted_ = 0, steps_posted_ = 0;
  std::chrono::steady_clock::time_point next_dead_check_;
};

}  // namespace dit::cli
