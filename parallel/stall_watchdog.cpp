#include "parallel/stall_watchdog.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

#include "parallel/rendezvous.h"

namespace dit {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

StallWatchdog::StallWatchdog(std::shared_ptr<RendezvousStore> store, int rank, int world) : store_(std::move(store)) {
  for (int r = 0; r < world; r++)
    if (r != rank) others_.push_back(r);
  thread_ = std::thread([this] { loop(); });
}

StallWatchdog::~StallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallWatchdog::add_context(const std::shared_ptr<gloo::Context>& ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  contexts_.push_back(ctx);
}

std::string StallWatchdog::stall_message() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stall_;
}

StallWatchdog::Waiting::Waiting(StallWatchdog* wd) : wd_(wd) {
  if (wd_ && wd_->depth_++ == 0) wd_->waiting_since_ns_ = now_ns();
}

StallWatchdog::Waiting::~Waiting() {
  if (wd_ && --wd_->depth_ == 0) wd_->waiting_since_ns_ = 0;
}

void StallWatchdog::loop() {
  const auto threshold = store_->stall_threshold();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(250));
    if (stop_ || !stall_.empty()) continue;
    const int64_t since = waiting_since_ns_;
    if (since == 0 || now_ns() - since < int64_t(1e9)) continue;
    lock.unlock();
    auto st = store_->find_stalled(others_, threshold);
    lock.lock();
    if (!st || waiting_since_ns_ == 0) continue;
    stall_ = "rank " + std::to_string(st->rank) + " " + st->describe();
    store_->post_abort(st->rank, st->describe(), false, true);
    note_peer_failure();
    break_all(stall_);
  }
}

// Gloo 0.5 cannot cancel a pending operation (closing a pair does not wake it), but its
// event loop fails every pending operation of a pair whose socket reports end of stream.
// So: shut down this process's connected TCP sockets (Gloo's pairs), except the
// rendezvous store's own connection; the blocked collective then throws at once.
void StallWatchdog::break_all(const std::string&) {
  const int keep = store_->connection_fd();
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  std::vector<int> fds;
  while (const dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != 0 || fd == keep || fd == dirfd(d)) continue;
    struct stat st;
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;
    if (peer.ss_family == AF_INET || peer.ss_family == AF_INET6) fds.push_back(int(fd));
  }
  closedir(d);
  for (int fd : fds) shutdown(fd, SHUT_RDWR);
}

}  // namespace dit
