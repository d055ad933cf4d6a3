// ShmExchange: the all-to-all, all-gather and point-to-point messages of a group whose ranks
// all run on one machine, through a shared-memory segment instead of TCP (ProcessGroup uses
// it when it can, and builds its all-reduce from these; barriers, broadcasts and groups that
// span machines stay on Gloo over TCP).
//
//   // every member, after the group's Gloo connection (the segment's name travels through
//   // the group's store; rank 0 creates it, everyone maps it, rank 0 unlinks it)
//   ShmOptions o{timeout, aborted, peer_failed};
//   std::string why;
//   auto shm = ShmExchange::create(store, rank, size, o, agree_over_tcp, &why);  // null: use TCP
//   shm->all_to_all(send, recv, bytes_per_rank);
//   uint64_t s = shm->post_send(buf, bytes, peer, tag);  shm->wait(s);
//
// Collectives (shm_collectives.cpp): each rank owns one slot (up to kSlotBytes). An operation runs in pieces: every rank copies its
// piece of the data for the others into its slot and publishes the piece's sequence number
// (`posted`), then copies what it needs out of the other ranks' slots and publishes that it
// is done reading (`done`); a rank overwrites its slot only after every other rank is done
// with the previous piece. Two copies of each byte, no system call while data flows, and the
// waits spin briefly, then yield, then sleep 50 µs at a time (a late peer costs no core).
//
// Failure: a wait gives up after the group's timeout, when the process aborts or another rank
// reports a failure, or at once when a member's process is gone (its pid, kept in the segment,
// no longer exists): dit::Error naming the rank. The group then fails as for a TCP error
// (process_group.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/strided_block.h"

namespace gloo::rendezvous {
class Store;
}

namespace dit {

// What the members of a group must share for the segment to be used: the machine (host name,
// boot id) and the namespaces that make one pid and one /dev/shm mean the same process and
// file (pid, net, ipc, mount). Simulated machines in their own namespaces (tools/netbench.sh)
// differ.
std::string shm_host_identity();

struct ShmOptions {
  std::chrono::milliseconds timeout{60000};
  // True once this process is aborting or has named a stopped rank (cheap; checked every
  // 20 ms while waiting).
  std::function<bool()> aborted;
  // True once another rank has reported a failure (reads the rendezvous store, which may
  // wait for its lock: checked only in waits longer than a second, once a second).
  std::function<bool()> peer_failed;
};

class ShmExchange {
 public:
  static constexpr size_t kSlotBytes = size_t(4) << 20;
  static constexpr size_t kLine = 64;  // a cache line: counters and collective pieces are aligned to it

  // Collective over the `size` ranks (each calls it once, `store` scoped to the group).
  // Returns null on every rank when the segment cannot be created or mapped on some rank
  // (`why` then says why, on the rank that failed; the others see "another rank ...").
  // `agree` combines every rank's local success: true only if all succeeded (the caller's
  // all-reduce over TCP), so that all ranks choose the same transport.
  static std::unique_ptr<ShmExchange> create(gloo::rendezvous::Store& store, int rank, int size,
                                             const ShmOptions& opts, const std::function<bool(bool)>& agree,
                                             std::string* why);
  ~ShmExchange();
  ShmExchange(const ShmExchange&) = delete;
  ShmExchange& operator=(const ShmExchange&) = delete;

  // send: size()·bytes_per_rank, block j for rank j; recv: block j from rank j.
  void all_to_all(const void* send, void* recv, size_t bytes_per_rank);
  // Uneven: send_counts[j] elements of elem_bytes to rank j (packed in rank order),
  // recv_counts[j] from rank j; every rank's send_counts[j] must equal rank j's
  // recv_counts[me] (as over TCP). Arrays of size() counts.
  void all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                    size_t elem_bytes);
  // This rank contributes `planes` rows of counts[rank] elements from send ([planes][counts[rank]]);
  // recv is `planes` planes of Σ counts elements, rank j's row at offset counts[0] + ... +
  // counts[j-1] of every plane (with one plane: the blocks packed in rank order).
  void all_gather_v(const void* send, void* recv, const size_t* counts, size_t elem_bytes, size_t planes = 1);
  // to[j]: the block of send that goes to rank j; from[j]: where rank j's block lands in recv
  // (arrays of size() blocks; rank j's to[me].count() must equal this rank's from[j].count()).
  void all_to_all_strided(const float* send, const StridedBlock* to, float* recv, const StridedBlock* from);
  // send: `planes` planes of Σ counts floats, rank j's share at offset counts[0] + ... + counts[j-1]
  // of every plane; recv ([planes][counts[rank]]): every rank's share for this rank, summed in
  // rank order (the same bits on every transport). recv may be this rank's share of send.
  void reduce_scatter_sum(const float* send, float* recv, const size_t* counts, size_t planes);

  // Point to point over a link (a ring buffer) per ordered pair of ranks (shm_p2p.cpp). A send
  // is complete once its bytes are in the link, a receive once they are in its buffer. A
  // progress thread (started by the first post) moves the data of pending operations while
  // the rank computes, and every wait moves it too. Messages on a link arrive in the order
  // sent, each into the receive posted with its tag; one whose receive is not posted yet
  // holds up its link until it is. Returns an operation id for wait().
  uint64_t post_send(const void* data, size_t bytes, int dst, uint32_t tag);
  uint64_t post_recv(void* data, size_t bytes, int src, uint32_t tag);
  void wait(uint64_t op);

  // Windows (shm_window.cpp): a block per rank that every member maps, written by its owner
  // and read in place by the others (the ring's K/V on one machine: one copy a byte instead
  // of three a hop). ensure_window is collective, with a store for this call's keys (each
  // rank creates its block in /dev/shm and publishes the name) and `agree` as in create();
  // a window already at least `bytes` large is kept without communicating. False on every
  // rank when some rank could not create or map a block (*why says why on that rank): the
  // caller keeps to messages. Then each use, on every rank in the same order:
  //   char* mine = window_begin();   // after every rank has released the previous use
  //   ... write mine ...;  window_publish();
  //   const char* theirs = window_peer(j);   // once rank j has published this use
  //   ... read ...;  window_release();       // done with every block of this use
  // A use may publish more than once, in stages (Ulysses: q, k, v, then the outputs, in parts
  // of the block that do not overlap): window_peer(j) waits for rank j's publication of the
  // same count as this rank's last, so every rank must publish the same number of times.
  bool ensure_window(gloo::rendezvous::Store& store, size_t bytes, const std::function<bool(bool)>& agree,
                     std::string* why);
  size_t window_bytes() const { return window_bytes_; }
  char* window_begin();
  void window_publish();
  const char* window_peer(int j);
  void window_release();
  // Rank j's block, writable and without waiting, for parts the ranks of a use agree to share
  // (counters, results; the caller orders them), and a wait until a counter in some block
  // reaches target (with the checks of every wait: a rank gone, the run aborting, the timeout).
  char* window_shared(int j);
  void window_wait(std::atomic<uint64_t>& c, uint64_t target);

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  // Published instead of a file name that could not be made (a store cannot hold an empty value).
  static constexpr const char* kNoFile = "-";
  struct Header;
  struct Op {
    char* data = nullptr;
    size_t bytes = 0, moved = 0;  // moved: payload bytes (padded) through the link so far
    uint32_t tag = 0;
    int peer = -1;
    bool header = false, done = false, used = false;  // header: a send's header is in the link
  };
  struct Incoming {  // the message being read from a peer's link
    uint32_t op = 0;   // 0: none
    size_t read = 0;
  };
  ShmExchange(void* base, size_t slot_bytes, size_t link_bytes, int rank, int size, const ShmOptions& opts);
  char* slot(int r) const;
  std::atomic<uint64_t>& posted(int r) const;
  std::atomic<uint64_t>& done(int r) const;
  std::atomic<uint64_t>& window_posted(int r) const;    // how many times rank r has published
  std::atomic<uint64_t>& window_released(int r) const;  // the last use rank r finished reading
  void unmap_windows();
  // Waits until c >= target; `peer` is the rank whose progress it shows.
  void wait_for(std::atomic<uint64_t>& c, uint64_t target, int peer,
                std::chrono::steady_clock::time_point deadline);
  void begin_piece(uint64_t seq, std::chrono::steady_clock::time_point deadline);  // my slot is free
  uint64_t largest(uint64_t mine);
  void exchange(const char* in, char* out, size_t most);
  void set_shares(const size_t* counts, size_t unit, size_t planes);
  void check_peer(int peer) const;
  // Spin, yield or sleep between polls (see the top of the file); every kCheckEvery, the
  // peer's process, the abort flag and the deadline.
  struct Backoff;
  // Links: the ring buffer from rank i to rank j and its counters (bytes written, read).
  size_t pair(int from, int to) const;
  char* link(int from, int to) const;
  std::atomic<uint64_t>& link_head(int from, int to) const;
  std::atomic<uint64_t>& link_tail(int from, int to) const;
  uint32_t new_op();
  bool progress();  // moves what it can on every link; true if anything moved
  bool progress_send(int dst);
  bool progress_recv(int src);
  bool read_link(int src);
  void progress_loop();
  // Doorbells: a futex word per rank, rung when its links move, and whether its thread sleeps.
  std::atomic<uint32_t>& bell(int r) const;
  std::atomic<uint32_t>& sleeping(int r) const;
  void ring_bell(int r);
  void start_progress_thread();

  void* base_;
  size_t bytes_ = 0, slot_bytes_ = 0;
  size_t pids_ = 0, posted_ = 0, done_ = 0, wposted_ = 0, wreleased_ = 0, bells_ = 0, slots_ = 0;  // offsets
  size_t link_bytes_ = 0, link_ctr_ = 0, links_ = 0;
  std::vector<Op> ops_;                             // [id - 1]; reused
  std::vector<uint32_t> free_ops_;
  std::vector<std::vector<uint32_t>> sends_to_;     // per peer: pending sends in post order
  std::vector<std::vector<uint32_t>> recvs_from_;   // per peer: pending receives in post order
  std::vector<Incoming> incoming_;                  // per peer
  // Per-rank blocks of the collective in progress, allocated once (no allocation per call).
  std::vector<StridedBlock> to_, from_;  // all-to-all: what goes to rank j, what comes from it (bytes)
  std::vector<StridedBlock> share_;      // all-gather, reduce-scatter: rank j's rows of every plane
  std::vector<size_t> one_each_;         // largest(): one uint64_t from each rank
  std::vector<uint64_t> most_;
  std::vector<const float*> sum_inputs_;  // reduce-scatter: every rank's share of a run
  int pending_ = 0;                                 // operations not yet complete
  // Point-to-point state above is guarded by mu_: the rank's thread and the progress thread.
  std::mutex mu_;
  bool stop_ = false;
  std::string failure_;  // what stopped the progress thread (rethrown by the next wait)
  std::thread progress_thread_;
  // Windows: every rank's block (this rank's writable, the others' read only), the size of
  // each and the current use.
  std::vector<char*> windows_;
  size_t window_bytes_ = 0;
  uint64_t window_use_ = 0;
  uint64_t window_published_ = 0;  // publications so far (one or more a use, the same on every rank)
  int rank_, size_;
  ShmOptions opts_;
  Header* header_;
  uint64_t seq_ = 0;
};

}  // namespace dit
