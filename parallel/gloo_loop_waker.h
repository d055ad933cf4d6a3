// GlooLoopWaker: makes Gloo's TCP event loop answer at once while groups connect and close.
//
// Gloo's loop thread waits in epoll_wait with a 10 ms timeout, and every descriptor removed
// from it by another thread (each pair's socket as a group connects and again as it closes)
// waits for the loop's next turn: up to 10 ms per pair, several times per group. A run of two
// ranks with three groups spent 30 ms connecting and as much closing that way, and it grows
// with the ranks. While a Wake is held, a thread rings an eventfd registered with the loop
// every 100 µs, so each of those waits ends within about that. Outside connects and teardown
// nothing rings: the loop sleeps as before while the model computes.
//
//   auto waker = std::make_unique<GlooLoopWaker>(device);   // once per Gloo device
//   { GlooLoopWaker::Wake w(waker.get());  ctx->connectFullMesh(store, device); }
//   { GlooLoopWaker::Wake w(waker.get());  device.reset(); }  // the loop thread's join, too
//   waker.reset();  // takes its eventfd off the loop if the device is still alive elsewhere
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

namespace gloo::transport {
class Device;
}

namespace dit {

class GlooLoopWaker {
 public:
  // Registers an eventfd with the device's loop. Without an eventfd (never expected) the
  // waker does nothing and Gloo keeps its own pace.
  explicit GlooLoopWaker(const std::shared_ptr<gloo::transport::Device>& device);  // a TCP device
  ~GlooLoopWaker();
  GlooLoopWaker(const GlooLoopWaker&) = delete;
  GlooLoopWaker& operator=(const GlooLoopWaker&) = delete;

  // How many times the loop has emptied the eventfd (tests: it rises only while held).
  uint64_t turns() const;

  // Rings while held; nested and concurrent holds are counted.
  class Wake {
   public:
    explicit Wake(GlooLoopWaker* w);
    ~Wake();
    Wake(const Wake&) = delete;
    Wake& operator=(const Wake&) = delete;

   private:
    GlooLoopWaker* w_;
  };

 private:
  struct Handler;
  void ring_loop();

  std::weak_ptr<gloo::transport::Device> device_;
  int fd_ = -1;
  std::unique_ptr<Handler> handler_;
  std::mutex mu_;
  std::condition_variable cv_;
  int holds_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dit
