#include "tools/cli/batch_relay.h"

#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "runtime/json_line.h"

namespace dit::cli {

namespace {

using Clock = std::chrono::steady_clock;

// "dit-batch-item-<replica>-<k>": replica's k-th record (JSON); "dit-batch-step-<replica>-<k>":
// its k-th step event (JSON).
std::string item_key(int replica, int k) { return "dit-batch-item-" + std::to_string(replica) + "-" + std::to_string(k); }
std::string step_key(int replica, int k) { return "dit-batch-step-" + std::to_string(replica) + "-" + std::to_string(k); }

std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

}  // namespace

ProgressRelay::ProgressRelay(std::shared_ptr<RendezvousStore> store, int world, int replica, std::vector<int> expected,
                             bool relay_steps)
    : store_(std::move(store)), world_(world), replica_(replica), expected_(std::move(expected)),
      received_(expected_.size(), 0), steps_received_(expected_.size(), 0), relay_steps_(relay_steps),
      next_dead_check_(Clock::now()) {}

void ProgressRelay::post_item(const ItemRecord& r) { store_->set(item_key(replica_, posted_++), bytes(record_json(r))); }

void ProgressRelay::post_step(const std::vector<int>& indices, const StepInfo& st) {
  if (!relay_steps_) return;
  const ordered_json j = {{"indices", indices},
                          {"step", st.step},
                          {"total", st.total},
                          {"seconds", st.step_seconds},
                          {"elapsed", st.elapsed_seconds}};
  store_->set(step_key(replica_, steps_posted_++), bytes(json_line(j)));
}

void ProgressRelay::poll(BatchProgress& progress) {
  for (int r = 1; r < int(expected_.size()); ++r) {
    while (relay_steps_ && store_->check({step_key(r, steps_received_[size_t(r)])})) {
      const std::vector<char> v = store_->get(step_key(r, steps_received_[size_t(r)]++));
      const auto j = nlohmann::json::parse(v.begin(), v.end());
      progress.step(j.at("indices").get<std::vector<int>>(), j.at("step").get<int>(), j.at("total").get<int>(),
                    j.at("seconds").get<double>(), j.at("elapsed").get<double>(), r);
    }
    while (received_[size_t(r)] < expected_[size_t(r)] && store_->check({item_key(r, received_[size_t(r)])})) {
      const std::vector<char> v = store_->get(item_key(r, received_[size_t(r)]++));
      progress.item(record_from_json(std::string(v.begin(), v.end())));
    }
  }
}

void ProgressRelay::check_peers() {
  if (auto ab = store_->find_abort()) {
    note_peer_failure();
    throw BatchAbort("rank " + std::to_string(ab->rank) + " failed: " + ab->message);
  }
  if (Clock::now() < next_dead_check_) return;
  next_dead_check_ = Clock::now() + std::chrono::seconds(2);
  std::vector<int> all(static_cast<size_t>(world_));
  for (int r = 0; r < world_; ++r) all[size_t(r)] = r;
  const std::vector<int> dead = store_->dead_local_ranks(all);
  if (!dead.empty()) {
    note_peer_failure();
    throw BatchAbort("rank " + std::to_string(dead[0]) + " is no longer running");
  }
  if (auto st = store_->find_stalled(all, store_->stall_threshold())) {
    note_peer_failure();
    throw BatchAbort("rank " + std::to_string(st->rank) + " " + st->describe());
  }
}

void ProgressRelay::wait_all(BatchProgress& progress) {
  for (;;) {
    poll(progress);
    bool all = true;
    for (size_t r = 1; r < expected_.size(); ++r) all = all && received_[r] == expected_[r];
    if (all) return;
    check_peers();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void ProgressRelay::post_end(bool failed) {
  if (store_) store_->set("dit-batch-end", std::vector<char>{char(failed ? 1 : 0)});
}

bool ProgressRelay::wait_end() {
  while (!store_->check({"dit-batch-end"})) {
    check_peers();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return store_->get("dit-batch-end").at(0) != 0;
}

}  // namespace dit::cli
