// StallWatchdog: names a rank that stopped responding while this process is blocked in a
// collective or a point-to-point wait, and unblocks it (internal to parallel/).
//
// Gloo cannot be interrupted and does not say whom it waits for: a rank that is SIGSTOPped
// or swapped out would keep its peers waiting for the whole --timeout, and the first
// error would name whichever healthy peer broke its connection first. So while this
// process has been waiting for more than a second, a thread reads the peers' heartbeats
// (RendezvousStore::find_stalled); when one has not moved for the stall threshold (8 s),
// it posts an abort on that rank's behalf ("rank 3 (host h, pid p) has not responded for
// 8 s (stopped or swapped out?)") and shuts down this process's connections to its peers,
// so the waiting collective throws at once and the rank exits naming the stopped one
// (ProcessGroup::fail puts the stall first). The other healthy ranks do the same, or see
// their connections to this one close and read the abort.
//
//   StallWatchdog wd(store, my_rank, world);   // one per process (ProcessGroup::Shared)
//   wd.add_context(ctx);                        // each group's Gloo context
//   { StallWatchdog::Waiting w(wd); gloo::allreduce(opts); }
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gloo {
class Context;
}

namespace dit {

class RendezvousStore;

class StallWatchdog {
 public:
  StallWatchdog(std::shared_ptr<RendezvousStore> store, int rank, int world);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  void add_context(const std::shared_ptr<gloo::Context>& ctx);  // kept for diagnosis
  // The message of the stall found, or empty.
  std::string stall_message() const;

  // Marks this process as blocked in communication for its lifetime (nestable).
  class Waiting {
   public:
    explicit Waiting(StallWatchdog* wd);
    ~Waiting();

   private:
    StallWatchdog* wd_;
  };

 private:
  void loop();
  void break_all(const std::string& message);

  std::shared_ptr<RendezvousStore> store_;
  std::vector<int> others_;
  std::atomic<int64_t> waiting_since_ns_{0};  // steady clock; 0: not waiting
  std::atomic<int> depth_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string stall_;
  std::vector<std::weak_ptr<gloo::Context>> contexts_;
  std::thread thread_;
};

}  // namespace dit
