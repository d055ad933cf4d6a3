// ProcessGroup: connecting a group (Gloo over TCP, and the shared-memory segment when its ranks
// share a machine), failures and their diagnosis, and point-to-point messages. The
// collectives are in process_group_collectives.cpp.
#include "parallel/process_group.h"

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "parallel/process_group_internal.h"
#include "parallel/shm_exchange.h"
#include "parallel/stall_watchdog.h"
#include "runtime/error.h"

namespace dit {

namespace {

// Slot prefix for our point-to-point messages; Gloo's collectives use 0x01..0x08.
constexpr uint8_t kP2PSlotPrefix = 0x40;
// How long the teardown barrier may take before we give up and close anyway.
constexpr std::chrono::milliseconds kTeardownTimeout{30 * 1000};

std::string join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// A failed or aborted group's Gloo context and buffers are never destroyed: Gloo may still
// hold pending operations on them (a recv into a buffer, a pair mid-write), and destroying
// them then can crash or block in Gloo's destructors while the process is on its way out.
// They are parked here for the rest of the process instead of being dropped, so they stay
// reachable (LeakSanitizer does not report them, and nothing is lost track of).
struct Graveyard {
  std::mutex mu;
  std::vector<std::shared_ptr<gloo::Context>> contexts;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers;
};
Graveyard& graveyard() {
  static Graveyard* g = new Graveyard;  // never destroyed: exit must not run Gloo's destructors
  return *g;
}

}  // namespace

struct P2PHandle::Slot {
  std::unique_ptr<gloo::transport::UnboundBuffer> buf;  // TCP
  uint64_t shm_op = 0;                                  // shared memory: the pending operation
  bool busy = false;
};

// ---------------------------------------------------------------- construction

ProcessGroup::ProcessGroup(std::shared_ptr<Shared> shared, std::string name, std::vector<int> members,
                           int rank)
    : shared_(std::move(shared)), name_(std::move(name)), members_(std::move(members)), rank_(rank) {}

std::shared_ptr<ProcessGroup> ProcessGroup::create_world(std::shared_ptr<RendezvousStore> store, int rank,
                                                         int size, const CommOptions& opts) {
  DIT_CHECK(store, "ProcessGroup::create_world: no rendezvous store");
  DIT_CHECK(size >= 1 && rank >= 0 && rank < size,
            "ProcessGroup::create_world: rank " << rank << " is not in a world of size " << size);
  DIT_CHECK(opts.timeout.count() > 0, "the communication timeout must be > 0");
  auto shared = std::make_shared<Shared>();
  shared->store = std::move(store);
  shared->timeout = opts.timeout;
  shared->shared_memory = opts.shared_memory;
  if (opts.shared_memory) shared->host = shm_host_identity();
  std::vector<int> members(size);
  std::iota(members.begin(), members.end(), 0);
  std::shared_ptr<ProcessGroup> pg(new ProcessGroup(shared, "world", members, rank));
  if (size == 1) return pg;
  // Gloo writes to sockets without MSG_NOSIGNAL in places: a peer that dies would kill
  // this rank with SIGPIPE and no message. Ignore it; the write fails with EPIPE and
  // becomes an IoException naming the operation instead.
  struct sigaction old;
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  shared->store->register_process(rank);
  shared->store->start_heartbeat(rank);
  shared->watchdog = std::make_unique<StallWatchdog>(shared->store, rank, size);
  try {
    gloo::transport::tcp::attr attr;
    if (!opts.iface.empty())
      attr.iface = opts.iface;
    else
      attr.hostname = opts.hostname.empty() ? "127.0.0.1" : opts.hostname;
    shared->device = gloo::transport::tcp::CreateDevice(attr);
    shared->waker = std::make_unique<GlooLoopWaker>(shared->device);
  } catch (const std::exception& e) {
    DIT_FAIL("rank " << rank << ": cannot create the TCP transport on "
                     << (opts.iface.empty() ? "address '" + opts.hostname + "'" : "interface '" + opts.iface + "'")
                     << ": " << clean_gloo_message(e.what()));
  }
  pg->store_prefix_ = "world";
  gloo::rendezvous::PrefixStore prefixed(pg->store_prefix_, *shared->store);
  pg->connect(prefixed);
  shared->store->mark_formed();
  return pg;
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(const std::string& name,
                                                  const std::vector<int>& member_global_ranks, bool own_window) {
  check_usable("split");
  DIT_CHECK(!name.empty(), "split: a group needs a name");
  int me = global_rank();
  int local = -1;
  for (size_t i = 0; i < member_global_ranks.size(); i++) {
    int g = member_global_ranks[i];
    DIT_CHECK(std::find(members_.begin(), members_.end(), g) != members_.end(),
              "split '" << name << "': rank " << g << " is not a member of group '" << name_ << "'");
    DIT_CHECK(std::count(member_global_ranks.begin(), member_global_ranks.end(), g) == 1,
              "split '" << name << "': rank " << g << " listed twice");
    if (g == me) local = int(i);
  }
  DIT_CHECK(local >= 0, "split '" << name << "': this rank (" << me << ") is not in [" << join(member_global_ranks)
                                  << "]; only members create a group");
  std::shared_ptr<ProcessGroup> pg(new ProcessGroup(shared_, name, member_global_ranks, local));
  if (pg->size() == 1) return pg;
  pg->own_window_ = own_window;
  pg->store_prefix_ = "group/" + name + "/" + join(member_global_ranks);
  gloo::rendezvous::PrefixStore prefixed(pg->store_prefix_, *shared_->store);
  pg->connect(prefixed);
  return pg;
}

void ProcessGroup::connect(gloo::rendezvous::Store& store) {
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size());
  ctx->setTimeout(shared_->timeout);  // must precede connectFullMesh
  run("connect", -1, [&] {
    // Everyone present first, through our store (which stops at once on another rank's
    // abort): Gloo's own pair connection blocks until its timeout if a peer never comes.
    std::vector<std::string> present;
    for (int r = 0; r < size(); r++) present.push_back("present/" + std::to_string(r));
    store.set(present[rank_], {'1'});
    store.wait(present, shared_->timeout);
    GlooLoopWaker::Wake w(shared_->waker.get());  // each pair waits for the loop's turn
    ctx->connectFullMesh(store, shared_->device);
  });
  if (shared_->watchdog) shared_->watchdog->add_context(ctx);
  ctx_ = std::move(ctx);
  connect_shared_memory(store);
}

// Every member publishes its machine (shm_host_identity), or that it wants TCP only; when all
// match, they map one segment for the all-to-alls, all-gathers and point-to-point messages.
// Every rank takes part whatever its own option, so that ranks started with different options
// still agree (on TCP). A failure to set up the segment on any rank leaves the whole group on
// TCP; shared_memory_note() says why.
void ProcessGroup::connect_shared_memory(gloo::rendezvous::Store& store) {
  run("connect (shared memory)", -1, [&] {
    const std::string mine = shared_->shared_memory ? shared_->host : std::string("tcp");
    store.set("host/" + std::to_string(rank_), std::vector<char>(mine.begin(), mine.end()));
    std::string first;
    for (int r = 0; r < size(); r++) {
      std::vector<char> h = store.get("host/" + std::to_string(r));
      const std::string theirs(h.begin(), h.end());
      if (r == 0) first = theirs;
      if (theirs == "tcp") {
        shm_note_ = "rank " + std::to_string(r) + " of group '" + name_ + "' asked for TCP only";
        return;
      }
      if (theirs != first) {
        shm_note_ = "rank " + std::to_string(r) + " of group '" + name_ + "' is on another machine than rank 0";
        return;
      }
    }
    // A segment of a group with these members, in this order, serves this one too (when every
    // member has it: the members created the same groups in the same order). Collectives and
    // windows run whole on one thread, one after the other; messages carry this group's
    // channel in their tags.
    // (Not for a group asking for a window of its own: every member asks alike.)
    std::weak_ptr<ShmExchange>& known = shared_->segments[members_];
    const std::shared_ptr<ShmExchange> existing = own_window_ ? nullptr : known.lock();
    if (!own_window_ && all_ranks_agree(existing != nullptr)) {
      shm_ = existing;
      shm_channel_ = shared_->segment_users[members_]++ & 0xFF;
      shm_counts_.assign(size_t(size()), 0);
      return;
    }
    ShmOptions o;
    o.timeout = shared_->timeout;
    Shared* sh = shared_.get();
    o.aborted = [sh] { return sh->aborted.load() || (sh->watchdog && !sh->watchdog->stall_message().empty()); };
    o.peer_failed = [sh] { return sh->store->find_abort().has_value(); };
    shm_ = ShmExchange::create(store, rank_, size(), o, [this](bool ok) { return all_ranks_agree(ok); }, &shm_note_);
    shm_counts_.assign(size_t(size()), 0);
    if (shm_ && !own_window_) {
      known = shm_;
      shm_channel_ = 0;
      shared_->segment_users[members_] = 1;
    }
  });
}

bool ProcessGroup::all_ranks_agree(bool mine) {
  int32_t v = mine ? 1 : 0;
  gloo::AllreduceOptions opts(ctx_);
  opts.setOutput(&v, 1);
  void (*fn)(void*, const void*, const void*, size_t) = &gloo::min<int32_t>;
  opts.setReduceFunction(fn);
  opts.setTag(next_tag());
  opts.setTimeout(shared_->timeout);
  gloo::allreduce(opts);
  return v == 1;
}

ProcessGroup::~ProcessGroup() {
  if (failed() || shared_->aborted.load()) {
    park_in_graveyard();
    return;
  }
  shutdown();
}

void ProcessGroup::park_in_graveyard() noexcept {
  Graveyard& g = graveyard();
  std::lock_guard<std::mutex> lock(g.mu);
  for (auto* m : {&send_slots_, &recv_slots_})
    for (auto& kv : *m)
      if (kv.second->buf) g.buffers.push_back(std::move(kv.second->buf));
  if (ctx_) g.contexts.push_back(std::move(ctx_));
}

void ProcessGroup::shutdown() noexcept {
  if (closed_) return;
  closed_ = true;
  if (!ctx_) return;
  bool pending = false;
  for (auto* m : {&send_slots_, &recv_slots_})
    for (auto& kv : *m) pending = pending || kv.second->busy;
  if (failed() || shared_->aborted.load() || pending) {
    park_in_graveyard();
    return;
  }
  try {
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(next_tag());
    opts.setTimeout(std::min(shared_->timeout, kTeardownTimeout));
    gloo::barrier(opts);
  } catch (...) {
    // A peer is gone; nothing left to protect.
  }
  GlooLoopWaker::Wake w(shared_->waker.get());  // closing each pair waits for the loop's turn
  send_slots_.clear();
  recv_slots_.clear();
  ctx_.reset();
  // After the world's last barrier nobody reads the store again: drop this run's keys
  // from a shared redis-server (a file: directory is removed by the launcher).
  if (name_ == "world" && rank_ == 0) shared_->store->cleanup();
}

std::chrono::milliseconds ProcessGroup::timeout() const { return shared_->timeout; }
const std::shared_ptr<RendezvousStore>& ProcessGroup::store() const { return shared_->store; }

// ---------------------------------------------------------------- errors

void ProcessGroup::check_usable(const char* op) const {
  if (!first_error_.empty())
    DIT_FAIL(op << " on group '" << name_ << "' (rank " << rank_ << " of " << size()
                << "): the group is unusable after an earlier failure: " << first_error_);
  if (closed_) DIT_FAIL(op << " on group '" << name_ << "': the group was shut down");
}

void ProcessGroup::fail(const char* op, int peer, const std::string& what) {
  std::ostringstream os;
  os << op << " on group '" << name_ << "' (rank " << rank_ << " of " << size();
  if (name_ != "world") os << ", global rank " << global_rank();
  os << ")";
  if (peer >= 0) os << " with rank " << peer << (name_ != "world" ? " (global " + std::to_string(global_rank(peer)) + ")" : "");
  os << ": ";
  // What went wrong elsewhere: a local peer that vanished without a word (killed,
  // crashed) is the cause; else the rank that reported a failure of its own through the
  // store. A killed peer's sockets close a moment before it shows as dead, so look again
  // for up to a second before settling for less.
  std::string diagnosis = shared_->watchdog ? shared_->watchdog->stall_message() : std::string();
  std::vector<int> others;
  for (int g : members_)
    if (g != global_rank()) others.push_back(g);
  auto gone = [](const std::vector<int>& v) {
    return std::string(v.size() == 1 ? "rank " : "ranks ") + join(v) + (v.size() == 1 ? " is" : " are") +
           " no longer running";
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (diagnosis.empty()) {
    auto dead = shared_->store->dead_local_ranks(others);
    std::vector<int> silent;
    for (int g : dead)
      if (!shared_->store->has_abort(g)) silent.push_back(g);
    auto ab = shared_->store->find_abort();
    bool last = std::chrono::steady_clock::now() >= deadline;
    if (!silent.empty()) {
      diagnosis = gone(silent);
      break;
    }
    if (ab && (!ab->secondary || last)) {
      diagnosis = ab->describe();
      break;
    }
    if (last) {
      if (!dead.empty()) diagnosis = gone(dead);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!diagnosis.empty()) shared_->peer_cause.store(true);
  if (!diagnosis.empty() && what.find(diagnosis) == std::string::npos)
    os << diagnosis << " (" << what << ")";
  else
    os << what;
  first_error_ = os.str();
  shared_->comm_failed.store(true);
  note_peer_failure();
  throw Error(first_error_);
}

bool ProcessGroup::failed_because_of_peer() const noexcept { return shared_->peer_cause.load(); }

void ProcessGroup::abort(const std::string& message) noexcept {
  shared_->aborted.store(true);
  try {
    shared_->store->post_abort(global_rank(), message, shared_->comm_failed.load());
  } catch (...) {
  }
}

// ---------------------------------------------------------------- point to point (the collectives: process_group_collectives.cpp)

P2PHandle& P2PHandle::operator=(P2PHandle&& o) noexcept {
  if (this != &o) {
    group_ = o.group_;
    slot_ = o.slot_;
    is_send_ = o.is_send_;
    peer_ = o.peer_;
    o.group_ = nullptr;
    o.slot_ = nullptr;
  }
  return *this;
}

P2PHandle::~P2PHandle() {
  // An unwaited operation stays pending in Gloo; its buffer stays busy.
}

void P2PHandle::wait() {
  if (!group_) return;
  group_->wait_handle(*this);
}

P2PHandle ProcessGroup::post(bool is_send, void* data, size_t bytes, int peer, uint32_t tag) {
  const char* op = is_send ? "isend" : "irecv";
  check_usable(op);
  DIT_CHECK(peer >= 0 && peer < size() && peer != rank_,
            op << " on group '" << name_ << "' (rank " << rank_ << " of " << size() << "): bad peer rank " << peer);
  auto& slots = is_send ? send_slots_ : recv_slots_;
  auto key = std::make_pair(static_cast<const void*>(data), bytes);
  auto it = slots.find(key);
  if (it == slots.end()) {
    auto s = std::make_unique<P2PHandle::Slot>();
    if (!shm_) s->buf = ctx_->createUnboundBuffer(data, bytes);
    it = slots.emplace(key, std::move(s)).first;
  }
  P2PHandle::Slot* slot = it->second.get();
  DIT_CHECK(!slot->busy, op << " on group '" << name_ << "': buffer " << data << " (" << bytes
                            << " bytes) still has a pending operation; wait() for it first");
  uint64_t gslot = gloo::Slot::build(kP2PSlotPrefix, tag);
  run(op, peer, [&] {
    if (shm_) {
      const uint32_t t = (tag & 0x00FFFFFFu) | (shm_channel_ << 24);  // the same on both ends
      slot->shm_op = is_send ? shm_->post_send(data, bytes, peer, t) : shm_->post_recv(data, bytes, peer, t);
    } else if (is_send) {
      slot->buf->send(peer, gslot, 0, bytes);
    } else {
      slot->buf->recv(peer, gslot, 0, bytes);
    }
  });
  slot->busy = true;
  P2PHandle h;
  h.group_ = this;
  h.slot_ = slot;
  h.is_send_ = is_send;
  h.peer_ = peer;
  return h;
}

P2PHandle ProcessGroup::isend(const void* data, size_t bytes, int dst, uint32_t tag) {
  return post(true, const_cast<void*>(data), bytes, dst, tag);
}

P2PHandle ProcessGroup::irecv(void* data, size_t bytes, int src, uint32_t tag) {
  return post(false, data, bytes, src, tag);
}

void ProcessGroup::wait_handle(P2PHandle& h) {
  P2PHandle::Slot* slot = h.slot_;
  bool is_send = h.is_send_;
  int peer = h.peer_;
  h.group_ = nullptr;
  h.slot_ = nullptr;
  const char* op = is_send ? "send" : "recv";
  check_usable(op);
  bool ok = true;
  run(op, peer, [&] {
    if (shm_)
      shm_->wait(slot->shm_op);
    else
      ok = is_send ? slot->buf->waitSend(nullptr, shared_->timeout) : slot->buf->waitRecv(nullptr, shared_->timeout);
  });
  if (!ok) fail(op, peer, "the operation was aborted");
  slot->busy = false;
}

}  // namespace dit
