// What process_group.cpp (connection, failure, point to point) and
// process_group_collectives.cpp (the collectives) share: the state every group of a process
// shares, and how an operation's errors become the group's one error.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gloo/common/error.h>

#include "parallel/gloo_loop_waker.h"
#include "parallel/gloo_message.h"
#include "parallel/process_group.h"
#include "parallel/stall_watchdog.h"
#include "runtime/error.h"

namespace gloo::transport {
class Device;
}

namespace dit {

// The state every group of this process shares (the world and its sub-groups).
struct ProcessGroup::Shared {
  std::shared_ptr<RendezvousStore> store;
  std::unique_ptr<StallWatchdog> watchdog;  // null for a world of one
  std::shared_ptr<gloo::transport::Device> device;
  std::unique_ptr<GlooLoopWaker> waker;  // rings Gloo's loop while groups connect and close
  std::chrono::milliseconds timeout;
  bool shared_memory = true;
  std::string host;  // shm_host_identity(), when shared_memory
  // Shared-memory segments by member list, and how many groups use each (their channels).
  std::map<std::vector<int>, std::weak_ptr<ShmExchange>> segments;
  std::map<std::vector<int>, uint32_t> segment_users;
  std::atomic<bool> aborted{false};
  std::atomic<bool> comm_failed{false};  // some group failed: this rank is a casualty, not the cause
  std::atomic<bool> peer_cause{false};   // ... and the failure was traced to another rank

  ~Shared() {
    {
      GlooLoopWaker::Wake w(waker.get());
      device.reset();  // joins Gloo's loop thread (unless a failed group's context keeps it)
    }
    waker.reset();
  }
};

// Runs f, translating any exception into dit::Error naming op, group and peer (fail()).
template <class F>
void ProcessGroup::run(const char* op, int peer, F&& f) {
  try {
    StallWatchdog::Waiting waiting(shared_->watchdog.get());
    f();
  } catch (const GenerationSuperseded&) {
    throw;  // connect_world joins the newer generation
  } catch (const dit::Error& e) {
    if (!first_error_.empty()) throw;
    fail(op, peer, e.what());
  } catch (const gloo::IoException& e) {
    fail(op, peer, clean_gloo_message(e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    fail(op, peer, clean_gloo_message(e.what()));
  } catch (const std::exception& e) {
    fail(op, peer, clean_gloo_message(e.what()));
  }
}

}  // namespace dit
