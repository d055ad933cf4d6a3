// ProcessGroup: the collectives every parallel feature uses, over a Gloo context (TCP), and for
// a group whose ranks all run on one machine, all-to-all, all-gather, all-reduce and
// point-to-point through shared memory (parallel/shm_exchange.h; the rest stays on TCP).
//
//   auto store = RendezvousStore::open(env.rendezvous, env.world, timeout);
//   auto world = ProcessGroup::create_world(store, env.rank, env.world, {timeout});
//   auto ulysses = world->split("ulysses[0,1]", {0, 1});       // members create it, same name
//   ulysses->all_to_all(send, recv, n_per_rank);
//   // ring attention: post, compute, wait
//   auto s = ring->isend(kv_cur, bytes, next, step);
//   auto r = ring->irecv(kv_next, bytes, prev, step);
//   compute(kv_cur);  s.wait();  r.wait();
//
// All ranks of a group call its collectives in the same order; each call takes the next
// tag from a per-group counter, so tags agree without communication. Every operation has
// the group's timeout; any failure (a peer died, a timeout, a Gloo error) becomes
// dit::Error("<op> on group '<name>' (rank r of n): ...") naming the peer where known,
// and leaves the group unusable: later calls fail at once with the first error.
// A group is used by one thread at a time (p2p waits included). Over shared memory a message
// waits in its link until its receive is posted: post receives before waiting for later
// messages from the same peer (every caller here posts all receives first).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/rendezvous.h"
#include "parallel/strided_block.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace dit {

struct CommOptions {
  std::chrono::milliseconds timeout = kDefaultCommTimeout;
  // Address this rank listens on: 127.0.0.1 for one machine; for several machines the
  // host's name or address (DIT_ADDR), or a network interface name in `iface`.
  std::string hostname = "127.0.0.1";
  std::string iface;
  // The all-to-alls, all-gathers, all-reduces and point-to-point messages of a group whose
  // ranks share this machine go through a shared-memory segment (parallel/shm_exchange.h);
  // false (on any rank of a group): TCP for everything (--transport tcp).
  bool shared_memory = true;
};

// The --transport flag's help (dit-gen, dit-bench, dit-comm-bench): auto | tcp.
inline constexpr const char* kTransportHelp =
    "auto: the collectives (all-to-all, all-gather, all-reduce) and messages (Ulysses, Ring, the CFG exchange, "
    "tensor parallelism) of ranks on one machine go through shared memory; barriers, broadcasts and everything "
    "between machines over TCP; tcp: everything over TCP (Gloo)";

class ProcessGroup;
class ShmExchange;

// A pending point-to-point send or receive. wait() blocks until it completes (or throws
// dit::Error after the group's timeout / when the peer fails). Move-only; waiting twice is
// a no-op. Not waiting leaves the buffer busy: posting it again throws.
class P2PHandle {
 public:
  P2PHandle() = default;
  P2PHandle(P2PHandle&& o) noexcept { *this = std::move(o); }
  P2PHandle& operator=(P2PHandle&& o) noexcept;
  P2PHandle(const P2PHandle&) = delete;
  P2PHandle& operator=(const P2PHandle&) = delete;
  ~P2PHandle();

  void wait();
  bool pending() const { return group_ != nullptr; }

 private:
  friend class ProcessGroup;
  struct Slot;
  ProcessGroup* group_ = nullptr;
  Slot* slot_ = nullptr;
  bool is_send_ = false;
  int peer_ = -1;
};
using SendHandle = P2PHandle;
using RecvHandle = P2PHandle;

class ProcessGroup {
 public:
  // Connects all `size` ranks through `store` (the world group, named "world").
  static std::shared_ptr<ProcessGroup> create_world(std::shared_ptr<RendezvousStore> store, int rank,
                                                    int size, const CommOptions& opts = {});
  // A sub-group of this one. Only its members call split, each with the same name and
  // member list (global ranks, in group-rank order); names must be unique per run.
  // A group of one rank needs no connection and never communicates. On shared memory a group
  // uses the segment (and window) of an earlier group with the same members, unless
  // `own_window`: then one of its own, so a use of its window may run inside a use of the
  // other group's (the replica's shared rows inside the attention's: parallel/shared_rows.h).
  std::shared_ptr<ProcessGroup> split(const std::string& name, const std::vector<int>& member_global_ranks,
                                      bool own_window = false);

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return int(members_.size()); }
  const std::string& name() const { return name_; }
  int global_rank(int local) const { return members_.at(local); }
  int global_rank() const { return members_.at(rank_); }
  const std::vector<int>& members() const { return members_; }
  std::chrono::milliseconds timeout() const;
  const std::shared_ptr<RendezvousStore>& store() const;

  // --- collectives (all members, same order, same counts) ---
  // send: size()*count_per_rank; chunk j goes to rank j; recv: chunk j came from rank j.
  void all_to_all(const float* send, float* recv, size_t count_per_rank);
  void all_to_all_bytes(const void* send, void* recv, size_t bytes_per_rank);
  // Uneven: send_counts[j] elements to rank j (packed in rank order), recv_counts[j] from j.
  void all_to_all_v(const float* send, const std::vector<size_t>& send_counts, float* recv,
                    const std::vector<size_t>& recv_counts);
  // Strided: to[j] is the block of send (rows at a stride) that goes to rank j, from[j] where
  // rank j's block lands in recv (parallel/strided_block.h); rank j's to[rank()] must hold as
  // many elements as this rank's from[j]. Ulysses' heads of every token row, in place.
  void all_to_all_strided(const float* send, const std::vector<StridedBlock>& to, float* recv,
                          const std::vector<StridedBlock>& from);
  // recv: size()*count, rank j's block at j*count.
  void all_gather(const float* send, float* recv, size_t count);
  void all_gather_bytes(const void* send, void* recv, size_t bytes);
  // This rank contributes recv_counts[rank()] elements; blocks packed in rank order.
  // With planes > 1, strided: send is [planes][recv_counts[rank()]], and recv is `planes`
  // planes of Σ recv_counts elements with rank j's row at recv_counts[0] + ... + recv_counts[j-1]
  // in each (the token rows of every batch item, gathered in place).
  void all_gather_v(const float* send, float* recv, const std::vector<size_t>& recv_counts, size_t planes = 1);
  void all_gather_v(const uint16_t* send, uint16_t* recv, const std::vector<size_t>& recv_counts, size_t planes = 1);
  void all_reduce_sum(float* data, size_t count);  // in place
  // send: size()*count_per_rank; recv: the sum over ranks of block rank().
  void reduce_scatter_sum(const float* send, float* recv, size_t count_per_rank);
  // The inverse of the strided all_gather_v: send is `planes` planes of Σ counts elements,
  // rank j's share at counts[0] + ... + counts[j-1] of each; recv ([planes][counts[rank()]])
  // gets the sum over ranks of this rank's share, summed in rank order (the same bits over
  // shared memory and TCP).
  void reduce_scatter_sum_v(const float* send, float* recv, const std::vector<size_t>& counts, size_t planes = 1);
  void broadcast(float* data, size_t count, int root);
  void broadcast_bytes(void* data, size_t bytes, int root);
  void barrier();
  // A barrier that waits as long as the other ranks take (their own work, say a long decode)
  // instead of the group's timeout: a rank that dies breaks its connections, and one that
  // stops responding is named by the stall watchdog within seconds, so this never hangs on a
  // lost rank.
  void barrier_for_work();

  // --- point to point (ring attention) ---
  // Buffers are registered once per (pointer, size, direction) and reused; keep using the
  // same buffers every step and nothing is created per step. Tags: caller-chosen, the
  // sender's and receiver's must match; one pending op per (buffer, direction).
  P2PHandle isend(const void* data, size_t bytes, int dst, uint32_t tag);
  P2PHandle irecv(void* data, size_t bytes, int src, uint32_t tag);
  void send(const void* data, size_t bytes, int dst, uint32_t tag) { isend(data, bytes, dst, tag).wait(); }
  void recv(void* data, size_t bytes, int src, uint32_t tag) { irecv(data, bytes, src, tag).wait(); }

  // --- windows (shared memory only: ring attention's K/V blocks read in place) ---
  // Collective: every member gets a block of at least `bytes` that the others read where it
  // lies (ShmExchange windows, parallel/shm_exchange.h). False on every member when the group
  // is not on shared memory or a block could not be set up (window_note() says why; the
  // latter is also printed once by the group's rank 0): use messages then. Each use, every
  // member in the same order; waits fail as collectives do:
  //   float* mine = g.window_begin();  ... write ...;  g.window_publish();
  //   const float* theirs = g.window_peer(j);  ... read ...;  g.window_release();
  bool ensure_window(size_t bytes);
  // Whether ensure_window can give windows at all: on shared memory and not turned off by
  // DIT_NO_SHM_WINDOWS (it can still fail for want of /dev/shm, which it says). Not collective.
  bool windows_allowed() const;
  const std::string& window_note() const { return window_note_; }
  size_t window_bytes() const;  // each member's block; 0: no window
  float* window_begin();
  void window_publish();
  const float* window_peer(int j);
  void window_release();
  // Parts of a use's blocks its members agree to share (Ulysses' attention tasks, taken by
  // whichever rank is free): rank j's block, writable, without waiting (after window_peer(j)
  // in the use), and a wait until a counter in one reaches target, failing as collectives do.
  float* window_shared(int j);
  void window_wait(std::atomic<uint64_t>& counter, uint64_t target);

  // Failure path: tells every rank that this one failed (abort key in the store), marks
  // every group of this process unusable and skips the teardown barrier. Never throws.
  void abort(const std::string& message) noexcept;
  // Clean end: a barrier (so peers do not see "connection closed"), then closes the
  // connections. Also done by the destructor unless the group failed or was aborted.
  void shutdown() noexcept;
  bool failed() const { return !first_error_.empty(); }
  // Whether a group of this process failed because of another rank, named in its error (a
  // rank that died, stopped responding or reported its own failure): this rank is a casualty
  // and the cause is reported where it happened (dit-gen: launcher.h, kPeerFailedExit).
  bool failed_because_of_peer() const noexcept;
  // Whether this group's all-to-all, all-gather, all-reduce and point-to-point messages go
  // through shared memory (its ranks are on one machine, none turned it off), and if not, why (empty for a
  // group of one).
  bool uses_shared_memory() const { return shm_ != nullptr; }
  // Groups of this process with the same members in the same order share one segment (the
  // world and the groups a small mesh makes of the same ranks): what identifies it, or null.
  const void* shared_memory_segment() const { return shm_.get(); }
  const std::string& shared_memory_note() const { return shm_note_; }

 private:
  struct Shared;
  friend class P2PHandle;
  ProcessGroup(std::shared_ptr<Shared> shared, std::string name, std::vector<int> members, int rank);
  void connect(gloo::rendezvous::Store& store);
  void connect_shared_memory(gloo::rendezvous::Store& store);
  bool all_ranks_agree(bool mine);  // a TCP all-reduce (min): true only if every rank says true
  void all_reduce_sum_shm(float* data, size_t count);
  uint32_t next_tag() { return next_tag_++; }
  // Runs f, translating any exception into dit::Error naming op, group and peer.
  template <class F>
  void run(const char* op, int peer, F&& f);
  [[noreturn]] void fail(const char* op, int peer, const std::string& what);
  void check_usable(const char* op) const;
  void barrier_with(std::chrono::milliseconds timeout);
  P2PHandle post(bool is_send, void* data, size_t bytes, int peer, uint32_t tag);
  void wait_handle(P2PHandle& h);
  // After a failure: keeps the Gloo context and buffers alive for the rest of the process.
  void park_in_graveyard() noexcept;
  template <class T>
  void all_gather_v_any(const T* send, T* recv, const std::vector<size_t>& recv_counts, size_t planes);

  std::shared_ptr<Shared> shared_;
  std::string name_;
  std::vector<int> members_;
  bool own_window_ = false;  // split(.., own_window): a shared-memory segment not shared with other groups
  int rank_;
  std::shared_ptr<gloo::Context> ctx_;  // null for a group of one
  uint32_t next_tag_ = 1;
  std::string first_error_;
  bool closed_ = false;
  std::map<std::pair<const void*, size_t>, std::unique_ptr<P2PHandle::Slot>> send_slots_, recv_slots_;
  std::vector<float> scratch_, scratch2_;  // TCP staging of the strided collectives
  std::vector<size_t> tcp_send_counts_, tcp_recv_counts_;
  std::shared_ptr<ShmExchange> shm_;  // null: TCP only; shared by groups with these members
  uint32_t shm_channel_ = 0;           // this group's messages on a shared segment: tag bits 24-31
  std::vector<size_t> shm_counts_;    // per rank, reused (nothing is allocated per call)
  std::string shm_note_;
  std::string store_prefix_;  // this group's keys in the rendezvous store
  uint32_t windows_made_ = 0;
  std::string window_note_;
  bool window_warned_ = false;  // ensure_window's warning, once per group
};

}  // namespace dit
