// Rendezvous: the key-value store through which the ranks of one run find each other
// (Gloo's FileStore, RedisStore or HashStore underneath), with what Gloo's stores lack:
//
//  - an "abort" key per rank: a rank that fails writes abort/<rank> = its message, and
//    every other rank that is waiting on the store stops at once with that message
//    instead of waiting for the timeout;
//  - a process registry (proc/<rank> = "host pid") so a rank that sees a connection drop
//    can tell which local peer is no longer running;
//  - waits that honour the run's timeout and end in dit::Error naming the missing keys;
//  - a key prefix per run (for a shared redis-server).
//
//   auto store = RendezvousStore::open("file:/tmp/dit-rdzv-abc", 4, std::chrono::seconds(300));
//   auto store = RendezvousStore::open("redis://10.0.0.1:6379/run42", 16, timeout);
//   auto store = RendezvousStore::in_memory(shared_hash_store, 4, timeout);  // ranks as threads
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/store.h>

namespace dit {

// An in-process store for ranks that are threads of one process (tests, benchmarks).
class MemoryStore : public gloo::rendezvous::HashStore {
 public:
  bool has(const std::vector<std::string>& keys) {
    std::lock_guard<std::mutex> lock(m_);
    for (const auto& k : keys)
      if (map_.find(k) == map_.end()) return false;
    return true;
  }
};

// The default timeout of every collective, rendezvous and p2p wait (--timeout).
constexpr std::chrono::milliseconds kDefaultCommTimeout{300 * 1000};

struct RendezvousSpec {
  enum class Kind { File, Redis } kind = Kind::File;
  std::string dir;             // file:DIR
  std::string host;            // redis://HOST:PORT[/RUN]
  int port = 6379;
  std::string run = "default";  // key prefix on a shared redis-server
};
// Parses "file:DIR" or "redis://HOST:PORT[/RUN]"; throws dit::Error on anything else.
RendezvousSpec parse_rendezvous(const std::string& spec);

class RendezvousStore : public gloo::rendezvous::Store {
 public:
  // "file:DIR" (the directory must exist) or "redis://HOST:PORT[/RUN]".
  static std::shared_ptr<RendezvousStore> open(const std::string& spec, int world_size,
                                               std::chrono::milliseconds timeout);
  // Over a store shared by threads of this process (one rank per thread).
  static std::shared_ptr<RendezvousStore> wrap(std::shared_ptr<MemoryStore> inner,
                                               int world_size, std::chrono::milliseconds timeout,
                                               std::string description = "memory");
  ~RendezvousStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;  // waits up to the timeout
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  bool check(const std::vector<std::string>& keys);  // non-blocking: are all keys present?

  // Best effort, never throws: tells every rank that `rank` failed with `message`.
  // `secondary`: it failed because another rank did (a lost connection), so readers
  // prefer a primary report when there is one.
  void post_abort(int rank, const std::string& message, bool secondary = false) noexcept;
  // The lowest rank that posted a primary abort, else the lowest secondary one, with its
  // message (non-blocking).
  struct AbortReport {
    int rank;
    std::string message;
    bool secondary;
  };
  std::optional<AbortReport> find_abort() noexcept;
  bool has_abort(int rank) noexcept;
  // Registers this process as `rank` (host name and pid) for dead-peer diagnosis.
  void register_process(int rank) noexcept;
  // Ranks registered on this host whose process is gone. Non-blocking, best effort.
  std::vector<int> dead_local_ranks(const std::vector<int>& ranks) noexcept;
  // Deletes this run's keys where the store allows it (redis); best effort.
  void cleanup() noexcept;

  int world_size() const { return world_size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& description() const { return description_; }

 private:
  struct Backend;
  RendezvousStore(std::unique_ptr<Backend> backend, int world_size,
                  std::chrono::milliseconds timeout, std::string description);
  std::unique_ptr<Backend> backend_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  std::string description_;
  std::mutex mu_;
};

// Records that this process saw another rank fail (its own failure is then secondary:
// post_abort marks it so). Called by the store and the process groups.
void note_peer_failure() noexcept;

// Opens the store named by `spec` and posts an abort for `rank`. For a rank that fails
// before it has connected (bad flag, missing model file). Best effort, never throws.
void report_rank_failure(const std::string& spec, int rank, int world_size,
                         const std::string& message) noexcept;

// Creates a fresh private directory $TMPDIR/dit-rdzv-XXXXXX (mode 0700) for a file:
// rendezvous on this machine, with an "owner" file naming this process (process table id
// and pid). First removes the dit-rdzv-* directories of this user whose owner ran here
// and is gone (a launcher that was SIGKILLed cannot remove its own).
std::string make_private_rendezvous_dir();
// Removes a rendezvous directory and everything in it; best effort.
void remove_rendezvous_dir(const std::string& dir) noexcept;
// The stale-directory sweep of make_private_rendezvous_dir, on its own: removes the
// dit-rdzv-* directories in `base` owned by this user whose owner process is gone.
// Returns how many were removed.
size_t remove_stale_rendezvous_dirs(const std::string& base) noexcept;

}  // namespace dit
