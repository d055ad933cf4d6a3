#include "parallel/gloo_loop_waker.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>

#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/loop.h>

namespace dit {

// Called on Gloo's loop thread: empties the eventfd (the loop's turn is what was wanted).
struct GlooLoopWaker::Handler final : gloo::transport::tcp::Handler {
  explicit Handler(int fd) : fd(fd) {}
  void handleEvents(int) override {
    uint64_t n;
    if (read(fd, &n, sizeof(n)) == sizeof(n)) turns.fetch_add(1, std::memory_order_relaxed);
  }
  int fd;
  std::atomic<uint64_t> turns{0};
};

namespace {
gloo::transport::tcp::Device& tcp_device(gloo::transport::Device& d) {
  return static_cast<gloo::transport::tcp::Device&>(d);
}
}  // namespace

GlooLoopWaker::GlooLoopWaker(const std::shared_ptr<gloo::transport::Device>& device) : device_(device) {
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0 || !device) return;
  handler_ = std::make_unique<Handler>(fd_);
  thread_ = std::thread([this] { ring_loop(); });
  tcp_device(*device).registerDescriptor(fd_, EPOLLIN, handler_.get());
}

GlooLoopWaker::~GlooLoopWaker() {
  // A device kept alive elsewhere (a failed group's context) still polls the eventfd: take it
  // off the loop first (that waits for the loop's turn, which the ringing brings at once).
  if (auto device = device_.lock(); device && handler_) {
    Wake w(this);
    tcp_device(*device).unregisterDescriptor(fd_, handler_.get());
  }
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  if (fd_ >= 0) close(fd_);
}

uint64_t GlooLoopWaker::turns() const { return handler_ ? handler_->turns.load(std::memory_order_relaxed) : 0; }

void GlooLoopWaker::ring_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || holds_ > 0; });
    if (stop_) return;
    lock.unlock();
    const uint64_t one = 1;
    (void)!write(fd_, &one, sizeof(one));
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    lock.lock();
  }
}

GlooLoopWaker::Wake::Wake(GlooLoopWaker* w) : w_(w && w->fd_ >= 0 ? w : nullptr) {
  if (!w_) return;
  {
    std::lock_guard<std::mutex> lock(w_->mu_);
    ++w_->holds_;
  }
  w_->cv_.notify_all();
}

GlooLoopWaker::Wake::~Wake() {
  if (!w_) return;
  std::lock_guard<std::mutex> lock(w_->mu_);
  --w_->holds_;
}

}  // namespace dit
