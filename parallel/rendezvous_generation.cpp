// The generation protocol of the rendezvous (documented in rendezvous.h): joining the
// newest joinable generation, waiting for it to form, leaving, and the clean-end cleanup.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "parallel/rendezvous.h"
#include "parallel/rendezvous_backend.h"
#include "runtime/error.h"
#include "runtime/process_identity.h"

namespace dit {

namespace {

using Clock = std::chrono::steady_clock;

// How long a rank whose generation has not formed stays after it failed, so that the
// ranks of its run that start a little later still find its abort.
constexpr std::chrono::milliseconds kLinger{5000};

std::string claim_name(int r) { return "claim." + std::to_string(r); }
std::string left_name(int r) { return "left." + std::to_string(r); }

std::string join_list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

std::unique_ptr<detail::RendezvousBackend> open_backend(const std::string& spec_str) {
  const RendezvousSpec spec = parse_rendezvous(spec_str);
  if (spec.kind == RendezvousSpec::Kind::File) return detail::make_file_backend(spec.dir, spec_str);
  return detail::make_redis_backend(spec.host, spec.port, spec.run, spec_str);
}

}  // namespace

// A claim whose owner ran on this host/boot/pid namespace and is gone: a rank (or a
// launcher) SIGKILLed before it could write left.<r>.
bool RendezvousStore::claim_is_dead(int64_t g, int rank) {
  auto v = backend_->read_marker(g, claim_name(rank));
  if (!v) return false;
  const auto sp = v->rfind(' ');
  if (sp == std::string::npos || v->substr(0, sp) != process_table_id()) return false;
  return !pid_alive(pid_t(std::atol(v->c_str() + sp + 1)));
}

bool RendezvousStore::joinable(int64_t g) {
  if (backend_->read_marker(g, "closed")) return false;
  const std::string w = std::to_string(world_size_);
  if (!backend_->create_marker(g, "world", w)) {
    auto have = backend_->read_marker(g, "world");
    if (have && *have != w) return false;
  }
  bool any_claim = false, all_gone = true;
  for (int r = 0; r < world_size_; r++) {
    if (!backend_->read_marker(g, claim_name(r))) continue;
    any_claim = true;
    if (!backend_->read_marker(g, left_name(r)) && !claim_is_dead(g, r)) all_gone = false;
  }
  return !(any_claim && all_gone);
}

bool RendezvousStore::try_claim(int64_t g, const std::vector<int>& ranks) {
  const std::string me = process_table_id() + " " + std::to_string(getpid());
  std::vector<int> got;
  for (int r : ranks) {
    if (backend_->create_marker(g, claim_name(r), me)) {
      got.push_back(r);
      continue;
    }
    // A slot that is taken belongs to another run: give back what we took here.
    for (int x : got) backend_->put_marker(g, left_name(x), "moved");
    return false;
  }
  return true;
}

std::vector<int> RendezvousStore::missing_claims(int64_t g, std::vector<bool>& seen) {
  std::vector<int> missing;
  for (int r = 0; r < world_size_; r++) {
    if (!seen[size_t(r)]) seen[size_t(r)] = backend_->read_marker(g, claim_name(r)).has_value();
    if (!seen[size_t(r)]) missing.push_back(r);
  }
  return missing;
}

std::shared_ptr<RendezvousStore> RendezvousStore::join(const std::string& spec, int world_size,
                                                       const std::vector<int>& ranks,
                                                       std::chrono::milliseconds timeout, bool wait_formed) {
  for (int r : ranks)
    DIT_CHECK(r >= 0 && r < world_size, "rendezvous '" << spec << "': rank " << r << " is not in a world of "
                                                       << world_size);
  std::shared_ptr<RendezvousStore> store(new RendezvousStore(open_backend(spec), world_size, timeout, spec));
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    {
      std::lock_guard<std::recursive_mutex> lock(store->mu_);
      auto& b = *store->backend_;
      for (int attempt = 0;; attempt++) {
        DIT_CHECK(attempt < 10000, "rendezvous '" << spec << "': cannot find or create a generation to join");
        const int64_t g = b.newest_generation();
        if (g > 0 && store->joinable(g) && store->try_claim(g, ranks)) {
          store->generation_ = g;
          break;
        }
        b.create_generation(g + 1);  // or someone else did: look again
      }
      b.select_generation(store->generation_);
      store->joined_ = ranks;
      store->left_ = false;
      store->forming_ = true;
    }
    if (!wait_formed) return store;
    try {
      store->wait_formed(ranks, deadline);
      return store;
    } catch (const GenerationSuperseded&) {
      store->leave(false);  // the others went to a newer generation: follow them
    }
  }
}

void RendezvousStore::wait_formed(const std::vector<int>& ranks, Clock::time_point deadline) {
  std::vector<bool> seen(size_t(world_size_), false);
  const auto start = Clock::now();
  for (;;) {
    std::vector<int> missing;
    int64_t newest = 0;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      missing = missing_claims(generation_, seen);
      newest = backend_->newest_generation();
    }
    if (missing.empty()) return;
    if (find_abort()) return;  // the caller's first wait reports it
    if (newest > generation_) throw GenerationSuperseded("superseded");
    if (Clock::now() > deadline)
      DIT_FAIL("rendezvous '" << description_ << "': timed out after "
                              << std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()
                              << " s waiting for rank" << (missing.size() == 1 ? " " : "s ") << join_list(missing)
                              << " to join (generation " << generation_ << "; did "
                              << (missing.size() == 1 ? "it" : "they") << " start, with the same --rendezvous?)");
    std::this_thread::sleep_for(detail::poll_interval(Clock::now() - start));
  }
  (void)ranks;
}

std::shared_ptr<RendezvousStore> RendezvousStore::attach(const std::string& spec, int world_size,
                                                         int64_t generation, std::chrono::milliseconds timeout) {
  std::shared_ptr<RendezvousStore> store(new RendezvousStore(open_backend(spec), world_size, timeout, spec));
  std::lock_guard<std::recursive_mutex> lock(store->mu_);
  store->generation_ = generation > 0 ? generation : std::max<int64_t>(1, store->backend_->newest_generation());
  store->backend_->select_generation(store->generation_);
  return store;
}

void RendezvousStore::leave(bool linger) noexcept {
  try {
    if (left_ || joined_.empty() || !backend_->has_generations()) return;
    if (linger) {
      const auto until = Clock::now() + std::min(kLinger, timeout_);
      std::vector<bool> seen(size_t(world_size_), false);
      for (;;) {
        {
          std::lock_guard<std::recursive_mutex> lock(mu_);
          if (missing_claims(generation_, seen).empty()) break;
        }
        if (Clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    std::lock_guard<std::recursive_mutex> lock(mu_);
    for (int r : joined_) backend_->put_marker(generation_, left_name(r), "1");
    left_ = true;
  } catch (...) {
  }
}

// Closed, abandoned (every claimed rank left or is dead here) or never joined.
bool RendezvousStore::is_finished(int64_t g) {
  if (backend_->read_marker(g, "closed")) return true;
  const auto w = backend_->read_marker(g, "world");
  const int world = w ? std::atoi(w->c_str()) : 0;
  for (int r = 0; r < world; r++)
    if (backend_->read_marker(g, claim_name(r)) && !backend_->read_marker(g, left_name(r)) && !claim_is_dead(g, r))
      return false;
  return true;
}

void RendezvousStore::cleanup() noexcept {
  try {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (!backend_->has_generations()) return;
    backend_->put_marker(generation_, "closed", "1");
    // This generation's keys stay until the next clean run (the other ranks may still be
    // writing their last markers); the finished older ones go now.
    for (int64_t g : backend_->generations())
      if (g < generation_ && is_finished(g)) backend_->remove_generation(g);
  } catch (...) {
  }
}

}  // namespace dit
