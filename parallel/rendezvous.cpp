#include "parallel/rendezvous.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "parallel/gloo_message.h"
#include "parallel/rendezvous_backend.h"
#include "runtime/error.h"
#include "runtime/process_identity.h"

namespace dit {

namespace {

std::atomic<bool> g_peer_failure_seen{false};

// How long a wait goes before it looks for a stopped peer (heartbeats).
constexpr std::chrono::milliseconds kStallCheckAfter{1000};

}  // namespace

RendezvousSpec parse_rendezvous(const std::string& spec) {
  RendezvousSpec s;
  if (spec.rfind("file:", 0) == 0) {
    s.kind = RendezvousSpec::Kind::File;
    s.dir = spec.substr(5);
    DIT_CHECK(!s.dir.empty(), "rendezvous '" << spec << "': file: needs a directory, e.g. file:/tmp/dit-rdzv");
    return s;
  }
  if (spec.rfind("redis://", 0) == 0) {
    s.kind = RendezvousSpec::Kind::Redis;
    std::string rest = spec.substr(8);
    auto slash = rest.find('/');
    if (slash != std::string::npos) {
      s.run = rest.substr(slash + 1);
      rest = rest.substr(0, slash);
      if (s.run.empty()) s.run = "default";
    }
    auto colon = rest.rfind(':');
    if (colon == std::string::npos) {
      s.host = rest;
    } else {
      s.host = rest.substr(0, colon);
      std::string port = rest.substr(colon + 1);
      char* end = nullptr;
      long p = std::strtol(port.c_str(), &end, 10);
      DIT_CHECK(!port.empty() && *end == 0 && p > 0 && p < 65536,
                "rendezvous '" << spec << "': bad port '" << port << "'");
      s.port = int(p);
    }
    DIT_CHECK(!s.host.empty(), "rendezvous '" << spec << "': missing host in redis://HOST:PORT");
    return s;
  }
  DIT_FAIL("rendezvous '" << spec << "': expected file:DIR or redis://HOST:PORT[/RUN]");
}

RendezvousStore::RendezvousStore(std::unique_ptr<detail::RendezvousBackend> backend, int world_size,
                                 std::chrono::milliseconds timeout, std::string description)
    : backend_(std::move(backend)),
      world_size_(world_size),
      timeout_(timeout),
      description_(std::move(description)) {}

RendezvousStore::~RendezvousStore() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_heartbeat_ = true;
  }
  stop_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  leave(true);
}

std::shared_ptr<RendezvousStore> RendezvousStore::wrap(std::shared_ptr<MemoryStore> inner,
                                                       int world_size, std::chrono::milliseconds timeout,
                                                       std::string description) {
  DIT_CHECK(inner, "RendezvousStore::wrap: no store");
  return std::shared_ptr<RendezvousStore>(
      new RendezvousStore(detail::make_memory_backend(std::move(inner)), world_size, timeout, std::move(description)));
}

void RendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  try {
    backend_->set(key, data);
  } catch (const std::exception& e) {
    DIT_FAIL("rendezvous '" << description_ << "': cannot set key '" << key
                            << "': " << clean_gloo_message(e.what()));
  }
}

bool RendezvousStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  try {
    for (const auto& k : keys)
      if (!backend_->has(k)) return false;
    return true;
  } catch (const std::exception& e) {
    DIT_FAIL("rendezvous '" << description_ << "': " << clean_gloo_message(e.what()));
  }
}

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout_in) {
  auto timeout = timeout_in.count() > 0 ? std::min(timeout_in, timeout_) : timeout_;
  if (timeout_in == gloo::rendezvous::Store::kDefaultTimeout) timeout = timeout_;
  const auto start = std::chrono::steady_clock::now();
  auto next_generation_check = start + std::chrono::milliseconds(200);
  auto next_stall_check = start + kStallCheckAfter;
  while (!check(keys)) {
    if (auto ab = find_abort()) {
      note_peer_failure();
      DIT_FAIL(ab->describe());
    }
    const auto now = std::chrono::steady_clock::now();
    if (forming_ && now >= next_generation_check) {
      next_generation_check = now + std::chrono::milliseconds(200);
      int64_t newest = 0;
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        try {
          newest = backend_->newest_generation();
        } catch (...) {
        }
      }
      if (newest > generation_)
        throw GenerationSuperseded("rendezvous '" + description_ + "': generation " + std::to_string(generation_) +
                                   " was superseded by " + std::to_string(newest));
    }
    if (hb_rank_ >= 0 && now >= next_stall_check) {
      next_stall_check = now + std::chrono::milliseconds(500);
      std::vector<int> others;
      for (int r = 0; r < world_size_; r++)
        if (r != hb_rank_) others.push_back(r);
      if (auto st = find_stalled(others, stall_threshold())) {
        post_abort(st->rank, st->describe(), false, true);
        note_peer_failure();
        DIT_FAIL("rank " << st->rank << " " << st->describe());
      }
    }
    if (now - start > timeout) {
      std::string missing;
      for (const auto& k : keys)
        if (!check({k})) missing += (missing.empty() ? "'" : ", '") + k + "'";
      DIT_FAIL("rendezvous '" << description_ << "': timed out after "
                              << std::chrono::duration_cast<std::chrono::seconds>(timeout).count()
                              << " s waiting for key(s) " << missing
                              << " (a rank did not start or did not reach this point)");
    }
    std::this_thread::sleep_for(detail::poll_interval(now - start));
  }
}

std::vector<char> RendezvousStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  try {
    return backend_->get(key);
  } catch (const std::exception& e) {
    DIT_FAIL("rendezvous '" << description_ << "': cannot get key '" << key
                            << "': " << clean_gloo_message(e.what()));
  }
}

int RendezvousStore::connection_fd() const { return backend_->connection_fd(); }

std::string RendezvousStore::AbortReport::describe() const {
  return "rank " + std::to_string(rank) + (unresponsive ? " " : " failed: ") + message;
}

void RendezvousStore::post_abort(int rank, const std::string& message, bool secondary, bool unresponsive) noexcept {
  try {
    std::string key = "abort/" + std::to_string(rank);
    if (check({key})) return;
    secondary = !unresponsive && (secondary || g_peer_failure_seen.load());
    const char kind = unresponsive ? 'U' : secondary ? 'S' : 'P';
    std::string msg = kind + (message.empty() ? std::string("(no message)") : message);
    set(key, std::vector<char>(msg.begin(), msg.end()));
  } catch (...) {
  }
}

bool RendezvousStore::has_abort(int rank) noexcept {
  try {
    return check({"abort/" + std::to_string(rank)});
  } catch (...) {
    return false;
  }
}

std::optional<RendezvousStore::AbortReport> RendezvousStore::find_abort() noexcept {
  std::optional<AbortReport> secondary;
  try {
    for (int r = 0; r < world_size_; r++) {
      std::string key = "abort/" + std::to_string(r);
      if (!check({key})) continue;
      std::vector<char> v;
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        v = backend_->get(key);
      }
      std::string msg(v.begin(), v.end());
      const char kind = msg.empty() ? 'P' : msg[0];
      if (kind == 'S' || kind == 'P' || kind == 'U') msg.erase(0, 1);
      if (kind != 'S') return AbortReport{r, msg, false, kind == 'U'};
      if (!secondary) secondary = AbortReport{r, msg, true};
    }
  } catch (...) {
  }
  return secondary;
}

void RendezvousStore::register_process(int rank) noexcept {
  try {
    std::string key = "proc/" + std::to_string(rank);
    std::string v = process_table_id() + " " + std::to_string(getpid());
    if (!check({key})) set(key, std::vector<char>(v.begin(), v.end()));
  } catch (...) {
  }
}

std::vector<int> RendezvousStore::dead_local_ranks(const std::vector<int>& ranks) noexcept {
  std::vector<int> dead;
  try {
    for (int r : ranks) {
      std::string key = "proc/" + std::to_string(r);
      if (!check({key})) continue;
      std::vector<char> v;
      {
        std::lock_guard<std::recursive_mutex> lock(mu_);
        v = backend_->get(key);
      }
      std::string s(v.begin(), v.end());
      auto sp = s.rfind(' ');
      if (sp == std::string::npos || s.substr(0, sp) != process_table_id()) continue;
      pid_t pid = pid_t(std::atol(s.c_str() + sp + 1));
      if (pid <= 0 || pid == getpid()) continue;
      if (!pid_alive(pid)) dead.push_back(r);  // a zombie not yet reaped by the launcher is dead too
    }
  } catch (...) {
  }
  return dead;
}

void note_peer_failure() noexcept { g_peer_failure_seen.store(true); }

void report_rank_failure(const std::string& spec, int rank, int world_size,
                         const std::string& message) noexcept {
  // A failure that is a peer's (read from its abort, or a stalled peer this rank posted
  // for) is already posted where every rank of the run looks; joining again would find
  // that generation abandoned, open a new one and linger there for peers that never come.
  if (g_peer_failure_seen.load()) return;
  try {
    // Our launcher joined for its workers; a rank started otherwise joins now (without
    // waiting for the others), posts, and on leaving lingers for late peers of its run.
    const char* g = std::getenv("DIT_RENDEZVOUS_GENERATION");
    auto store = (g && *g) ? RendezvousStore::attach(spec, world_size, std::atoll(g), std::chrono::seconds(5))
                           : RendezvousStore::join(spec, world_size, {rank}, std::chrono::seconds(5), false);
    store->post_abort(rank, message);
  } catch (...) {
  }
}

}  // namespace dit
