// Liveness through the rendezvous store: each rank process rewrites its heartbeat marker
// hb.<rank> = "<counter> <host> <pid>" every second from a thread of its own. A process
// that is stopped (SIGSTOP, a debugger) or swapped out stops all its threads, this one
// too, so its counter stops: a peer that has been waiting for a while reads the counters
// and names the rank whose counter has not moved (find_stalled). The only store traffic on
// the normal path is this one write per second per rank; the reads happen only while a
// rank is already waiting longer than usual.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "parallel/rendezvous.h"
#include "parallel/rendezvous_backend.h"

namespace dit {

namespace {

constexpr std::chrono::milliseconds kHeartbeatPeriod{1000};
constexpr std::chrono::milliseconds kDefaultStall{8000};
// Never less than three heartbeats: at one period (--timeout 1) a heartbeat written a little
// late on a loaded machine read as a stopped rank (the decode test under ctest -j2 in CI).
constexpr std::chrono::milliseconds kMinStall = 3 * kHeartbeatPeriod;

std::string host_name() {
  char buf[256] = {0};
  return gethostname(buf, sizeof(buf) - 1) == 0 && buf[0] ? buf : "?";
}

}  // namespace

void RendezvousStore::start_heartbeat(int rank) {
  if (!backend_->has_generations() || heartbeat_.joinable()) return;
  hb_rank_ = rank;
  heartbeat_ = std::thread([this, rank] { heartbeat_loop(rank); });
}

void RendezvousStore::heartbeat_loop(int rank) {
  const std::string tail = " " + host_name() + " " + std::to_string(getpid());
  const std::string name = "hb." + std::to_string(rank);
  for (uint64_t count = 0;; count++) {
    try {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      backend_->put_marker(generation_, name, std::to_string(count) + tail);
    } catch (...) {
      // The store is unreachable: the waits will say so.
    }
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (stop_cv_.wait_for(lock, kHeartbeatPeriod, [this] { return stop_heartbeat_; })) return;
  }
}

std::chrono::milliseconds RendezvousStore::stall_threshold() const {
  std::chrono::milliseconds t = kDefaultStall;
  if (const char* v = std::getenv("DIT_STALL_TIMEOUT")) {
    const double s = std::atof(v);
    if (s > 0) t = std::chrono::milliseconds(int64_t(s * 1000));
  }
  return std::max(std::min(t, timeout_), kMinStall);
}

std::string RendezvousStore::Stall::describe() const {
  std::ostringstream os;
  os << "(host " << host << ", pid " << pid << ") has not responded for " << int(std::lround(seconds))
     << " s (stopped or swapped out?)";
  return os.str();
}

std::optional<RendezvousStore::Stall> RendezvousStore::find_stalled(const std::vector<int>& ranks,
                                                                    std::chrono::milliseconds threshold) noexcept {
  try {
    if (!backend_->has_generations()) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    std::optional<Stall> worst;
    std::lock_guard<std::mutex> hb_lock(hb_mu_);
    for (int r : ranks) {
      std::optional<std::string> v;
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        v = backend_->read_marker(generation_, "hb." + std::to_string(r));
      }
      if (!v || v->empty()) continue;  // no heartbeat yet (still starting): not judged
      const std::string& value = *v;
      auto it = seen_.find(r);
      if (it == seen_.end() || it->second.first != value) {
        seen_[r] = {value, now};
        continue;
      }
      const double idle = std::chrono::duration<double>(now - it->second.second).count();
      if (idle * 1000 < double(threshold.count()) || (worst && worst->seconds >= idle)) continue;
      Stall s{r, idle, "?", 0};
      std::istringstream is(value);
      std::string count;
      is >> count >> s.host >> s.pid;
      worst = s;
    }
    return worst;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace dit
