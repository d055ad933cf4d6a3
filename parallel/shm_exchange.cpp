#include "parallel/shm_exchange.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <gloo/rendezvous/store.h>

#include "parallel/shm_mapping.h"
#include "runtime/error.h"

namespace dit {

namespace {

constexpr uint64_t kMagic = 0x6469742d73686d31ull;  // "dit-shm1"
constexpr size_t kLine = ShmExchange::kLine;  // for the layout below
constexpr int kMaxRanks = 4096;
// A wait spins for kSpinFor (a peer a few microseconds late), then yields the core until
// kYieldFor (other ranks or threads on an oversubscribed core run meanwhile), then sleeps
// 50 µs at a time (a peer that is still computing).
constexpr std::chrono::microseconds kSpinFor{50}, kYieldFor{1000};
// While sleeping, look at the members' processes, the abort flag and the deadline this often;
// at the store's abort records (which may wait for the store's lock, held by the heartbeat
// while it writes: hundreds of ms on a slow disk) only in waits this long, this often.
constexpr std::chrono::milliseconds kCheckEvery{20}, kStoreCheckAfter{1000};

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string ns_id(const char* name) {
  struct stat st;
  std::string p = std::string("/proc/self/ns/") + name;
  if (stat(p.c_str(), &st) != 0) return "?";
  return std::to_string(uint64_t(st.st_dev)) + ":" + std::to_string(uint64_t(st.st_ino));
}

// Per rank a pid and four counters on their own cache lines (collectives, windows), and a slot; per ordered pair of
// ranks a link (two counters, a ring buffer).
struct Layout {
  size_t pids, posted, done, wposted, wreleased, bells, link_ctr, slots, links, slot_bytes, link_bytes, total;
  Layout(int n, size_t slot, size_t link) : slot_bytes(slot), link_bytes(link) {
    const size_t pairs = size_t(n) * size_t(n - 1);
    pids = kLine;
    posted = round_up(pids + size_t(n) * sizeof(int32_t), kLine);
    done = posted + size_t(n) * kLine;
    wposted = done + size_t(n) * kLine;
    wreleased = wposted + size_t(n) * kLine;
    bells = wreleased + size_t(n) * kLine;
    link_ctr = bells + size_t(n) * kLine;
    slots = round_up(link_ctr + pairs * 2 * kLine, 4096);
    links = slots + size_t(n) * slot;
    total = shm_file_bytes(links + pairs * link);  // whole 2 MB pages from 2 MB up (parallel/shm_mapping.h)
  }
};

// Slot size: 4 MB for a few ranks, less for many (the slots stay within 16 MB), at least 512 KB.
size_t slot_bytes_for(int n) {
  size_t s = (size_t(16) << 20) / size_t(n);
  s = std::clamp(s, size_t(512) << 10, ShmExchange::kSlotBytes);
  return s / 4096 * 4096;
}

// Link size: 1 MB for a few ranks, less for many (the links stay within 16 MB), at least 64 KB.
size_t link_bytes_for(int n) {
  size_t s = (size_t(16) << 20) / (size_t(n) * size_t(n - 1));
  s = std::clamp(s, size_t(64) << 10, size_t(1) << 20);
  return s / 4096 * 4096;
}

bool process_gone(int32_t pid) {
  if (pid <= 0 || pid == getpid()) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  // A killed child its parent has not reaped yet is still listed, as a zombie.
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  size_t p = line.rfind(')');
  return p != std::string::npos && p + 2 < line.size() && (line[p + 2] == 'Z' || line[p + 2] == 'X');
}

void pause_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

std::string shm_host_identity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::ostringstream os;
  os << host << "/" << read_first_line("/proc/sys/kernel/random/boot_id");
  for (const char* ns : {"pid", "net", "ipc", "mnt"}) os << "/" << ns << "=" << ns_id(ns);
  return os.str();
}

struct ShmExchange::Header {
  uint64_t magic;
  uint32_t size;
  uint32_t reserved;
  uint64_t slot_bytes, link_bytes;
};

ShmExchange::ShmExchange(void* base, size_t slot_bytes, size_t link_bytes, int rank, int size, const ShmOptions& opts)
    : base_(base), rank_(rank), size_(size), opts_(opts), header_(static_cast<Header*>(base)) {
  const Layout lay(size, slot_bytes, link_bytes);
  bytes_ = lay.total;
  slot_bytes_ = lay.slot_bytes;
  link_bytes_ = lay.link_bytes;
  pids_ = lay.pids;
  posted_ = lay.posted;
  done_ = lay.done;
  wposted_ = lay.wposted;
  wreleased_ = lay.wreleased;
  bells_ = lay.bells;
  link_ctr_ = lay.link_ctr;
  slots_ = lay.slots;
  links_ = lay.links;
  sends_to_.resize(size_t(size));
  recvs_from_.resize(size_t(size));
  incoming_.resize(size_t(size));
  for (std::vector<StridedBlock>* v : {&to_, &from_, &share_}) v->assign(size_t(size), StridedBlock{});
  one_each_.assign(size_t(size), 0);
  most_.assign(size_t(size), 0);
  sum_inputs_.assign(size_t(size), nullptr);
  ops_.reserve(64);
  free_ops_.reserve(64);
  for (int j = 0; j < size; ++j) {
    sends_to_[size_t(j)].reserve(32);
    recvs_from_[size_t(j)].reserve(32);
  }
}

ShmExchange::~ShmExchange() {
  if (progress_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    ring_bell(rank_);
    progress_thread_.join();
  }
  unmap_windows();
  if (base_) munmap(base_, bytes_);
}

std::unique_ptr<ShmExchange> ShmExchange::create(gloo::rendezvous::Store& store, int rank, int size,
                                                 const ShmOptions& opts, const std::function<bool(bool)>& agree,
                                                 std::string* why) {
  DIT_CHECK(size >= 2 && size <= kMaxRanks && rank >= 0 && rank < size, "ShmExchange: rank " << rank << " of " << size);
  const Layout lay(size, slot_bytes_for(size), link_bytes_for(size));
  std::string name, error;
  void* base = MAP_FAILED;
  int fd = -1;
  bool created = false;
  // Rank 0 removes the name once every rank has mapped the segment, or when set-up fails
  // (agree() throws when a peer is lost): nothing is left in /dev/shm either way.
  struct Unlink {
    const std::string& name;
    const bool& created;
    ~Unlink() {
      if (created) unlink(name.c_str());
    }
  } unlink_at_exit{name, created};
  if (rank == 0) {
    std::random_device rd;
    std::ostringstream os;
    os << "/dev/shm/dit-gen-" << getpid() << "-" << std::hex << ((uint64_t(rd()) << 32) | rd());
    name = os.str();
    fd = open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    created = fd >= 0;
    if (fd < 0) {
      error = "cannot create " + name + ": " + std::strerror(errno);
    } else if (int e = posix_fallocate(fd, 0, off_t(lay.total)); e != 0) {  // no SIGBUS later on a full /dev/shm
      error = "cannot reserve " + std::to_string(lay.total >> 20) + " MB in " + name + ": " + std::strerror(e);
    } else if ((base = map_shm(fd, lay.total)) == MAP_FAILED) {  // on 2 MB pages before the others map it
      error = "cannot map " + name + ": " + std::strerror(errno);
    }
    const std::string published = error.empty() ? name : kNoFile;
    store.set("shm", std::vector<char>(published.begin(), published.end()));
  } else {
    std::vector<char> v = store.get("shm");
    name.assign(v.begin(), v.end());
    if (name.empty() || name == kNoFile) {
      name.clear();
      error = "rank 0 could not create the segment";
    } else {
      fd = open(name.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) error = "cannot open " + name + ": " + std::strerror(errno);
    }
  }
  if (error.empty() && base == MAP_FAILED) {
    struct stat st;
    if (fstat(fd, &st) != 0 || size_t(st.st_size) != lay.total) {
      error = name + " is not the segment rank 0 made";
    } else {
      base = map_shm(fd, lay.total);
      if (base == MAP_FAILED) error = "cannot map " + name + ": " + std::strerror(errno);
    }
  }
  if (fd >= 0) close(fd);
  std::unique_ptr<ShmExchange> ex;
  if (base != MAP_FAILED) {
    ex.reset(new ShmExchange(base, lay.slot_bytes, lay.link_bytes, rank, size, opts));
    if (rank == 0) {
      ex->header_->magic = kMagic;
      ex->header_->size = uint32_t(size);
      ex->header_->slot_bytes = lay.slot_bytes;
      ex->header_->link_bytes = lay.link_bytes;
    }
    reinterpret_cast<std::atomic<int32_t>*>(static_cast<char*>(base) + lay.pids)[rank].store(int32_t(getpid()));
  }
  const bool all = agree(error.empty());  // a barrier: rank 0's header and every pid are written
  if (why) *why = !error.empty() ? error : all ? "" : "another rank could not map the segment";
  if (!all) return nullptr;
  DIT_CHECK(ex->header_->magic == kMagic && ex->header_->size == uint32_t(size) &&
                ex->header_->slot_bytes == lay.slot_bytes && ex->header_->link_bytes == lay.link_bytes,
            "ShmExchange: " << name << " has another layout than this rank expects");
  return ex;
}

char* ShmExchange::slot(int r) const { return static_cast<char*>(base_) + slots_ + size_t(r) * slot_bytes_; }

std::atomic<uint64_t>& ShmExchange::posted(int r) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + posted_ + size_t(r) * kLine);
}

std::atomic<uint64_t>& ShmExchange::done(int r) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + done_ + size_t(r) * kLine);
}

std::atomic<uint64_t>& ShmExchange::window_posted(int r) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + wposted_ + size_t(r) * kLine);
}

std::atomic<uint64_t>& ShmExchange::window_released(int r) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + wreleased_ + size_t(r) * kLine);
}

void ShmExchange::check_peer(int peer) const {
  // Any member gone stops the wait (the one waited for first): an exchange needs them all, and
  // a run that lost a rank is over.
  auto gone = [&](int j) {
    const int32_t pid = reinterpret_cast<const std::atomic<int32_t>*>(static_cast<const char*>(base_) + pids_)[j].load();
    if (process_gone(pid)) DIT_FAIL("rank " << j << " (pid " << pid << ") is no longer running");
  };
  if (peer >= 0) gone(peer);
  for (int j = 0; j < size_; ++j)
    if (j != rank_ && j != peer) gone(j);
}

struct ShmExchange::Backoff {
  using Clock = std::chrono::steady_clock;
  const ShmExchange* ex;
  int peer;
  Clock::time_point start = Clock::now(), deadline, next_check = start + kCheckEvery, next_store_check = start;
  uint64_t polls = 0;
  Backoff(const ShmExchange& e, int p, Clock::time_point d) : ex(&e), peer(p), deadline(d) {}
  // Between two polls: a pause instruction; every 64th time, a yield or a sleep once the
  // wait is long, and every kCheckEvery the checks (throws dit::Error).
  void pause() {
    if (++polls % 64 != 0) {
      pause_cpu();
      return;
    }
    const auto now = Clock::now();
    if (now - start >= kYieldFor) {
      timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    } else if (now - start >= kSpinFor) {
      sched_yield();
    }
    if (now < next_check) return;
    next_check = now + kCheckEvery;
    ex->check_peer(peer);
    auto whom = [this] { return peer >= 0 ? "rank " + std::to_string(peer) : std::string("the other ranks"); };
    if (ex->opts_.aborted && ex->opts_.aborted()) DIT_FAIL("stopped waiting for " << whom() << ": the run is aborting");
    if (now - start >= kStoreCheckAfter && now >= next_store_check) {
      next_store_check = now + kStoreCheckAfter;
      if (ex->opts_.peer_failed && ex->opts_.peer_failed())
        DIT_FAIL("stopped waiting for " << whom() << ": another rank reported a failure");
    }
    if (now >= deadline)
      DIT_FAIL("timed out after " << ex->opts_.timeout.count() / 1000.0 << " s waiting for " << whom()
                                  << " (shared memory)");
  }
};

void ShmExchange::wait_for(std::atomic<uint64_t>& c, uint64_t target, int peer,
                           std::chrono::steady_clock::time_point deadline) {
  if (c.load(std::memory_order_acquire) >= target) return;
  Backoff b(*this, peer, deadline);
  while (c.load(std::memory_order_acquire) < target) b.pause();
}

// A point-to-point operation (shm_p2p.cpp): moves data itself (as the progress thread does)
// until the operation is complete.
void ShmExchange::wait(uint64_t id) {
  std::unique_lock<std::mutex> lock(mu_);
  DIT_CHECK(id >= 1 && id <= ops_.size() && ops_[id - 1].used, "shared memory: wait for an unknown operation " << id);
  if (!ops_[id - 1].done) {
    const int peer = ops_[id - 1].peer;
    Backoff b(*this, peer, std::chrono::steady_clock::now() + opts_.timeout);
    for (;;) {
      if (!failure_.empty()) DIT_FAIL(failure_);
      const bool moved = progress();
      if (ops_[id - 1].done) break;
      lock.unlock();
      if (moved) b = Backoff(*this, peer, b.deadline);  // data moves: keep spinning
      b.pause();
      lock.lock();
    }
  }
  ops_[id - 1].used = false;
  free_ops_.push_back(uint32_t(id));
}

// The progress thread: moves the data of pending point-to-point operations while the rank
// computes (a ring's next K/V block travels during the current block's attention, as Gloo's
// I/O thread moves TCP data). It runs on the rank's cores (it inherits their affinity) and
// sleeps on this rank's doorbell (a futex in the segment) whenever nothing moves: a peer rings
// it after writing into a link to this rank or reading from one, and a post rings it here.
void ShmExchange::progress_loop() {
  std::atomic<uint32_t>& bell = this->bell(rank_);
  std::atomic<uint32_t>& asleep = sleeping(rank_);
  for (;;) {
    const uint32_t seen = bell.load();
    bool moved = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      try {
        if (pending_ > 0 && failure_.empty()) moved = progress();
      } catch (const std::exception& e) {  // a malformed message: the rank's next wait reports it
        failure_ = e.what();
      }
    }
    if (moved) continue;
    asleep.store(1);
    timespec ts{0, 100 * 1000 * 1000};  // look at stop_ now and then
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell), FUTEX_WAIT, seen, &ts, nullptr, 0);
    asleep.store(0);
  }
}

std::atomic<uint32_t>& ShmExchange::bell(int r) const {
  return *reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(base_) + bells_ + size_t(r) * kLine);
}

std::atomic<uint32_t>& ShmExchange::sleeping(int r) const {
  return *reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(base_) + bells_ + size_t(r) * kLine + 4);
}

void ShmExchange::ring_bell(int r) {
  bell(r).fetch_add(1);
  if (sleeping(r).load()) syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell(r)), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

void ShmExchange::start_progress_thread() {
  if (progress_thread_.joinable()) return;
  progress_thread_ = std::thread([this] { progress_loop(); });
}

}  // namespace dit
