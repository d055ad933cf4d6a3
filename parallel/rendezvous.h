// Rendezvous: the key-value store through which the ranks of one run find each other
// (Gloo's FileStore, RedisStore or HashStore underneath), with what Gloo's stores lack:
//
//  - a fresh *generation* per run, so a file: directory or a redis run name can be reused
//    run after run, whatever the previous run left behind (protocol below);
//  - an "abort" key per rank: a rank that fails writes abort/<rank> = its message, and
//    every other rank that is waiting on the store stops at once with that message
//    instead of waiting for the timeout;
//  - a process registry (proc/<rank> = "host pid") so a rank that sees a connection drop
//    can tell which local peer is no longer running;
//  - a heartbeat per rank process (rendezvous_liveness.cpp), so a rank that is stopped or
//    swapped out is named instead of timing out on a healthy peer;
//  - waits that honour the run's timeout and end in dit::Error naming the missing keys.
//
//   auto store = RendezvousStore::join("file:/shared/rdzv", 4, {rank}, timeout);  // a rank
//   auto store = RendezvousStore::attach(spec, 4, generation, timeout);           // our workers
//   auto store = RendezvousStore::wrap(shared_hash_store, 4, timeout);  // ranks as threads
//
// Generations. Under one name (a file: directory, a redis run name) each run uses
// generation g = 1, 2, 3, ...: its own subdirectory DIR/gen-<g> or key prefix
// dit/RUN/g<g>/, holding the run's keys and these markers:
//   world      the world size (first writer wins; a joiner with another size moves on)
//   claim.<r>  rank r belongs to this generation ("<process table id> <pid>" of its owner)
//   left.<r>   rank r's owner has ended (cleanly or not)
//   closed     the run ended cleanly (rank 0, after the final barrier)
//   hb.<r>     rank r's heartbeat ("<counter> <host> <pid>", rewritten every second)
// A rank (or a launcher, for all its local ranks at once) joins like this:
//   1. g = the newest generation. If g is *joinable* and every wanted slot claim.<r> can be
//      created exclusively (SET NX; for files: written whole under a private name, then
//      link()ed into place, so no reader sees a marker that exists but is empty), those
//      ranks are in g.
//   2. Else (or when a claim is taken: a rank of an earlier run holds it) create g+1
//      atomically (mkdir / a compare-and-set of dit/RUN/generation; losing the race is
//      fine) and go to 1 — with the newest generation, whoever created it.
//   g is joinable unless it is closed, has another world size, or was abandoned: someone
//   claimed a slot and every claimed rank has left (or its owner ran on this host and is
//   gone: a SIGKILLed rank never writes left.<r>).
//   3. join() then waits until all ranks have claimed ("formed"). While it waits, a newer
//      generation means its ranks went elsewhere (a stale claim was in their way): it marks
//      its ranks left here and joins again. An abort in g ends the wait (the caller reports it).
// Ending: every owner writes left.<r> for its ranks. A rank that fails before its
// generation has formed first lingers (up to 5 s) for the rest to join, so that ranks of
// the same run starting a little later still see its abort instead of a fresh generation.
// A rank that fails because it read a peer's abort posts nothing more (report_rank_failure).
// After a clean run rank 0 writes `closed` (the next run takes g+1) and deletes the older
// generations that are finished (closed, abandoned, or never joined); a generation with
// live claims (a run still going under the same name) is left alone. So a name holds the
// keys of about one run.
// Races this covers: ranks of run N+1 starting while run N's ranks are still tearing down
// (N is formed, so its slots are taken: N+1 gets a new generation); ranks of one run on
// several machines arriving in any order (they meet in the newest joinable generation;
// the ones that joined a stale one move); a rank of the previous run killed before its
// run formed (its claim is stale: same host -> pid check; another host -> the others make
// g+1 and the waiting rank moves; if the stale claim completed g, the ranks in g see g+1
// while they connect and move too — this last path has no test). Not covered: two runs
// under one name started at the same moment with the same world size (they may mix: use
// distinct names for concurrent runs).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/store.h>

namespace dit {

namespace detail {
class RendezvousBackend;
}

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

// Thrown by a wait while this rank's generation is still forming and a newer one
// appeared (see step 3 above): the caller joins again.
class GenerationSuperseded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RendezvousStore : public gloo::rendezvous::Store {
 public:
  // Joins `ranks` (one, or a launcher's local ranks) in the newest joinable generation of
  // `spec` ("file:DIR", the directory must exist, or "redis://HOST:PORT[/RUN]"). With
  // wait_formed, returns once every rank of the world has joined (or one has aborted);
  // throws dit::Error after `timeout` naming the ranks that never came.
  static std::shared_ptr<RendezvousStore> join(const std::string& spec, int world_size,
                                               const std::vector<int>& ranks,
                                               std::chrono::milliseconds timeout, bool wait_formed = true);
  // Opens generation `generation` of `spec` without joining (our launcher's workers: the
  // launcher joined for them; DIT_RENDEZVOUS_GENERATION), or the newest one when 0.
  static std::shared_ptr<RendezvousStore> attach(const std::string& spec, int world_size, int64_t generation,
                                                 std::chrono::milliseconds timeout);
  // The newest generation, without joining (inspection, tests).
  static std::shared_ptr<RendezvousStore> open(const std::string& spec, int world_size,
                                               std::chrono::milliseconds timeout) {
    return attach(spec, world_size, 0, timeout);
  }
  // Over a store shared by threads of this process (one rank per thread): no generations.
  static std::shared_ptr<RendezvousStore> wrap(std::shared_ptr<MemoryStore> inner,
                                               int world_size, std::chrono::milliseconds timeout,
                                               std::string description = "memory");
  ~RendezvousStore() override;  // leave(true) for the ranks this store joined

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;  // waits up to the timeout
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  // Throws dit::Error on another rank's abort or on the timeout, GenerationSuperseded
  // while forming (see above).
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  bool check(const std::vector<std::string>& keys);  // non-blocking: are all keys present?

  // Best effort, never throws: tells every rank that `rank` failed with `message`.
  // `secondary`: it failed because another rank did (a lost connection), so readers
  // prefer a primary report when there is one. `unresponsive`: posted by a peer on behalf
  // of a rank that stopped responding; `message` then reads after "rank N ".
  void post_abort(int rank, const std::string& message, bool secondary = false,
                  bool unresponsive = false) noexcept;
  // The lowest rank that posted a primary abort, else the lowest secondary one, with its
  // message (non-blocking).
  struct AbortReport {
    int rank;
    std::string message;
    bool secondary;
    bool unresponsive = false;
    // "rank 3 failed: <message>", or "rank 3 <message>" for an unresponsive rank.
    std::string describe() const;
  };
  std::optional<AbortReport> find_abort() noexcept;
  bool has_abort(int rank) noexcept;
  // Registers this process as `rank` (host name and pid) for dead-peer diagnosis.
  void register_process(int rank) noexcept;
  // Ranks registered on this host whose process is gone. Non-blocking, best effort.
  std::vector<int> dead_local_ranks(const std::vector<int>& ranks) noexcept;

  // Liveness (rendezvous_liveness.cpp): starts this process's heartbeat thread for `rank`
  // (no-op for an in-memory store), and names a rank among `ranks` whose heartbeat has
  // not moved for `threshold` of this process's observation.
  void start_heartbeat(int rank);
  struct Stall {
    int rank;
    double seconds;    // since its heartbeat was last seen moving (at least)
    std::string host;  // from its heartbeat record
    long pid = 0;
    std::string describe() const;  // "(host h, pid p) has not responded for 12 s (stopped or swapped out?)"
  };
  std::optional<Stall> find_stalled(const std::vector<int>& ranks, std::chrono::milliseconds threshold) noexcept;
  // Stall threshold: DIT_STALL_TIMEOUT (seconds) or 8 s, not above the store's timeout, and
  // never below three heartbeat periods (3 s).
  std::chrono::milliseconds stall_threshold() const;

  // The world has connected: waits no longer throw GenerationSuperseded.
  void mark_formed() noexcept { forming_ = false; }
  // Marks this store's joined ranks as ended (see the protocol); with `linger`, first
  // waits up to 5 s for a generation that has not formed to form. Idempotent, no throw.
  void leave(bool linger) noexcept;
  // Clean end of the run (rank 0, after the final barrier): closes this generation and
  // deletes the finished older generations. Best effort.
  void cleanup() noexcept;

  // The store's own network connection (redis), which the stall watchdog must not close.
  int connection_fd() const;

  int world_size() const { return world_size_; }
  int64_t generation() const { return generation_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& description() const { return description_; }

 private:
  RendezvousStore(std::unique_ptr<detail::RendezvousBackend> backend, int world_size,
                  std::chrono::milliseconds timeout, std::string description);
  // The join protocol (rendezvous_generation.cpp).
  bool joinable(int64_t g);
  bool try_claim(int64_t g, const std::vector<int>& ranks);
  std::vector<int> missing_claims(int64_t g, std::vector<bool>& seen);
  void wait_formed(const std::vector<int>& ranks, std::chrono::steady_clock::time_point deadline);
  bool is_finished(int64_t g);
  bool claim_is_dead(int64_t g, int rank);
  void heartbeat_loop(int rank);

  std::unique_ptr<detail::RendezvousBackend> backend_;
  int world_size_;
  std::chrono::milliseconds timeout_;
  std::string description_;
  int64_t generation_ = 1;
  std::vector<int> joined_;  // ranks this store claimed (and must leave)
  bool left_ = false;
  int hb_rank_ = -1;  // this process's rank when its heartbeat runs
  std::atomic<bool> forming_{false};
  std::recursive_mutex mu_;  // every backend call

  // Heartbeat and stall observation.
  std::thread heartbeat_;
  bool stop_heartbeat_ = false;  // guarded by stop_mu_; stop_cv_ wakes the heartbeat at once
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::mutex hb_mu_;
  std::map<int, std::pair<std::string, std::chrono::steady_clock::time_point>> seen_;  // rank -> value, since
};

// Records that this process saw another rank fail (its own failure is then secondary:
// post_abort marks it so). Called by the store and the process groups.
void note_peer_failure() noexcept;

// Opens the store named by `spec` and posts an abort for `rank`. For a rank that fails
// before it has connected (bad flag, missing model file). Best effort, never throws.
// Does nothing once this process has seen a peer fail (note_peer_failure): that failure
// is already posted in the generation the run's ranks share.
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
