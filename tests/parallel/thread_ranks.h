// Ranks as threads of this test process, connected through one in-memory store.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/process_group.h"

namespace dit_test {

// CommOptions with this timeout and the defaults for the rest (one machine).
inline dit::CommOptions comm_options(std::chrono::milliseconds timeout) {
  dit::CommOptions o;
  o.timeout = timeout;
  return o;
}

// Runs fn(world group, rank) on `world` threads; returns the first failure ("rank r: ...")
// or "" (Catch assertions are not thread-safe: rank threads throw instead). shared_memory
// false: every collective over TCP (--transport tcp).
inline std::string run_rank_threads(int world, std::chrono::milliseconds timeout,
                                    const std::function<void(std::shared_ptr<dit::ProcessGroup>, int)>& fn,
                                    bool shared_memory = true) {
  auto hash = std::make_shared<dit::MemoryStore>();
  std::mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; r++) {
    threads.emplace_back([&, r] {
      try {
        auto store = dit::RendezvousStore::wrap(hash, world, timeout);
        dit::CommOptions o = comm_options(timeout);
        o.shared_memory = shared_memory;
        auto pg = dit::ProcessGroup::create_world(store, r, world, o);
        fn(pg, r);
        pg->shutdown();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return first_error;
}

}  // namespace dit_test
