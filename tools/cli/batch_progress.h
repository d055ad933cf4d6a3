// Progress of a batch, shown by rank 0: on a terminal one line with the overall bar (items
// done/total, images per minute, ETA) and the current item's step; with --progress json one
// JSON object per line on stderr:
//
//   {"event":"batch_start","total":10,"to_generate":7,"replicas":2}
//   {"event":"step","index":4,"step":3,"total":50,"step_seconds":0.41,"elapsed":1.2,"replica":0}
//   {"event":"item_done","index":4,"status":"done","output":"out/00004-goldfish.png","seconds":20.5,
//    "done":5,"total":10}                                   (+ "error" when status is "failed")
//   {"event":"batch_done","total":10,"generated":7,"skipped":2,"failed":1,"seconds":140.2,"images_per_minute":3.0}
//
// Step and item_done events cover every replica's items (the other replicas relay theirs to
// rank 0 through the rendezvous store, see batch.cpp); the bar shows rank 0's own replica.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "runtime/progress.h"
#include "tools/cli/batch_results.h"

namespace dit::cli {

class BatchProgress {
 public:
  BatchProgress(ProgressMode mode, int total, int to_generate, int replicas);
  // Replica `replica` finished step `step` of `total` of the micro-batch `indices` (the bar
  // shows rank 0's own replica; JSON events come from every replica).
  void step(const std::vector<int>& indices, int step, int total, double step_seconds, double elapsed,
            int replica = 0);
  // An item finished (any replica): counts it, emits item_done, prints failures.
  void item(const ItemRecord& r);
  // Ends the bar, emits batch_done and prints the summary line; returns the number failed.
  int finish(const std::string& results_path);
  int failed() const { return failed_; }

 private:
  void draw();
  void emit(const ordered_json& j) const;  // --progress json: one line
  double elapsed() const;
  ProgressMode mode_;
  int total_, to_generate_, replicas_;
  int generated_ = 0, skipped_ = 0, failed_ = 0;
  std::string current_;  // "item 4: step 3/50"
  bool open_line_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace dit::cli
