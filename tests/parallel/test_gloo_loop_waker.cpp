// GlooLoopWaker: Gloo's loop turns while a Wake is held, and stops being rung when released.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include <gloo/transport/tcp/device.h>

#include "parallel/gloo_loop_waker.h"

using namespace dit;
using namespace std::chrono_literals;

TEST_CASE("gloo loop waker: rings the loop only while held", "[parallel][waker]") {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto waker = std::make_unique<GlooLoopWaker>(device);
  std::this_thread::sleep_for(20ms);
  REQUIRE(waker->turns() == 0);  // nothing rings unless held
  {
    GlooLoopWaker::Wake w(waker.get());
    GlooLoopWaker::Wake nested(waker.get());
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (waker->turns() < 10 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    CHECK(waker->turns() >= 10);
  }
  // At most one ring is on its way after the release; on a loaded machine the loop may take
  // a while to serve it, so wait until the count stays put for 50 ms, then for 30 ms more.
  uint64_t after = waker->turns();
  for (const auto until = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(50ms);
    const uint64_t now = waker->turns();
    if (now == after) break;
    after = now;
  }
  std::this_thread::sleep_for(30ms);
  CHECK(waker->turns() == after);

  SECTION("the waker goes first while the device lives on (a failed group's context)") {
    waker.reset();
    std::this_thread::sleep_for(20ms);
  }
  SECTION("the device goes first, its loop thread's join rung along") {
    {
      GlooLoopWaker::Wake w(waker.get());
      device.reset();
    }
    waker.reset();
  }
  CHECK_FALSE(waker);
}
