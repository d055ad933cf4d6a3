// ShmExchange's point-to-point operations: a link (ring buffer) per ordered pair of ranks.
//
// A message on a link is a 64-byte header (tag, payload bytes) and the payload, padded to a
// multiple of 64 bytes; the link's size is a multiple of 64, so a header never wraps. The
// sender advances `head` (release) after writing, the receiver `tail` after reading; both
// count bytes since the start and only grow, so head - tail is what the link holds. The
// operation tables are guarded by mu_ (the rank's thread and the progress thread both move data).
#include <algorithm>
#include <cstring>

#include "parallel/shm_exchange.h"
#include "runtime/error.h"

namespace dit {

namespace {

constexpr size_t kLine = 64;

struct MessageHeader {
  uint32_t tag;
  uint32_t reserved;
  uint64_t bytes;
};
static_assert(sizeof(MessageHeader) <= kLine);

size_t padded(size_t n) { return (n + kLine - 1) / kLine * kLine; }

// Copies n bytes into / out of a ring of `cap` bytes at stream position pos (wrapping).
void ring_write(char* ring, size_t cap, uint64_t pos, const char* src, size_t n) {
  const size_t o = size_t(pos % cap), a = std::min(n, cap - o);
  std::memcpy(ring + o, src, a);
  if (n > a) std::memcpy(ring, src + a, n - a);
}
void ring_read(char* dst, const char* ring, size_t cap, uint64_t pos, size_t n) {
  const size_t o = size_t(pos % cap), a = std::min(n, cap - o);
  std::memcpy(dst, ring + o, a);
  if (n > a) std::memcpy(dst + a, ring, n - a);
}

}  // namespace

// Index of the link from rank `from` to rank `to` among the n·(n−1) ordered pairs.
size_t ShmExchange::pair(int from, int to) const {
  return size_t(from) * size_t(size_ - 1) + size_t(to < from ? to : to - 1);
}

char* ShmExchange::link(int from, int to) const {
  return static_cast<char*>(base_) + links_ + pair(from, to) * link_bytes_;
}

std::atomic<uint64_t>& ShmExchange::link_head(int from, int to) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + link_ctr_ + pair(from, to) * 2 * kLine);
}

std::atomic<uint64_t>& ShmExchange::link_tail(int from, int to) const {
  return *reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(base_) + link_ctr_ + pair(from, to) * 2 * kLine +
                                                   kLine);
}

uint32_t ShmExchange::new_op() {
  uint32_t id;
  if (!free_ops_.empty()) {
    id = free_ops_.back();
    free_ops_.pop_back();
  } else {
    ops_.emplace_back();
    id = uint32_t(ops_.size());
  }
  ops_[id - 1] = Op{};
  ops_[id - 1].used = true;
  ++pending_;
  return id;
}

uint64_t ShmExchange::post_send(const void* data, size_t bytes, int dst, uint32_t tag) {
  DIT_CHECK(dst >= 0 && dst < size_ && dst != rank_, "shared memory: bad destination rank " << dst);
  start_progress_thread();
  std::unique_lock<std::mutex> lock(mu_);
  const uint32_t id = new_op();
  Op& op = ops_[id - 1];
  op.data = static_cast<char*>(const_cast<void*>(data));
  op.bytes = bytes;
  op.tag = tag;
  op.peer = dst;
  sends_to_[size_t(dst)].push_back(id);
  progress_send(dst);  // as much as the link takes now
  lock.unlock();
  ring_bell(rank_);  // the progress thread writes the rest
  return id;
}

uint64_t ShmExchange::post_recv(void* data, size_t bytes, int src, uint32_t tag) {
  DIT_CHECK(src >= 0 && src < size_ && src != rank_, "shared memory: bad source rank " << src);
  start_progress_thread();
  std::unique_lock<std::mutex> lock(mu_);
  const uint32_t id = new_op();
  Op& op = ops_[id - 1];
  op.data = static_cast<char*>(data);
  op.bytes = bytes;
  op.tag = tag;
  op.peer = src;
  recvs_from_[size_t(src)].push_back(id);
  progress_recv(src);  // what has arrived already
  lock.unlock();
  ring_bell(rank_);
  return id;
}

bool ShmExchange::progress_send(int dst) {
  std::vector<uint32_t>& q = sends_to_[size_t(dst)];
  std::atomic<uint64_t>& head = link_head(rank_, dst);
  char* ring = link(rank_, dst);
  bool moved = false;
  while (!q.empty()) {
    Op& op = ops_[q.front() - 1];
    uint64_t h = head.load(std::memory_order_relaxed);  // only this rank writes it
    size_t space = link_bytes_ - size_t(h - link_tail(rank_, dst).load(std::memory_order_acquire));
    if (!op.header) {
      if (space < kLine) break;
      MessageHeader mh{op.tag, 0, op.bytes};
      std::memcpy(ring + h % link_bytes_, &mh, sizeof(mh));
      h += kLine;
      space -= kLine;
      op.header = true;
      head.store(h, std::memory_order_release);
      moved = true;
    }
    const size_t total = padded(op.bytes), n = std::min(total - op.moved, space);
    if (n > 0) {
      const size_t real = op.moved < op.bytes ? std::min(n, op.bytes - op.moved) : 0;
      ring_write(ring, link_bytes_, h, op.data + op.moved, real);
      op.moved += n;
      head.store(h + n, std::memory_order_release);
      moved = true;
    }
    if (op.moved < total) break;
    op.done = true;
    --pending_;
    q.erase(q.begin());
  }
  if (moved) ring_bell(dst);  // data to read
  return moved;
}

bool ShmExchange::progress_recv(int src) {
  const bool moved = read_link(src);
  if (moved) ring_bell(src);  // room to write
  return moved;
}

bool ShmExchange::read_link(int src) {
  Incoming& in = incoming_[size_t(src)];
  std::vector<uint32_t>& posted = recvs_from_[size_t(src)];
  std::atomic<uint64_t>& tail = link_tail(src, rank_);
  const char* ring = link(src, rank_);
  bool moved = false;
  for (;;) {
    uint64_t t = tail.load(std::memory_order_relaxed);  // only this rank writes it
    size_t avail = size_t(link_head(src, rank_).load(std::memory_order_acquire) - t);
    if (in.op == 0) {
      if (avail < kLine || posted.empty()) return moved;
      MessageHeader mh;
      std::memcpy(&mh, ring + t % link_bytes_, sizeof(mh));
      auto it = std::find_if(posted.begin(), posted.end(), [&](uint32_t id) { return ops_[id - 1].tag == mh.tag; });
      if (it == posted.end()) return moved;  // its receive is not posted yet
      Op& op = ops_[*it - 1];
      DIT_CHECK(mh.bytes == op.bytes, "rank " << src << " sent " << mh.bytes << " bytes with tag " << mh.tag
                                              << ", this rank receives " << op.bytes);
      in.op = *it;
      in.read = 0;
      posted.erase(it);
      t += kLine;
      avail -= kLine;
      tail.store(t, std::memory_order_release);
      moved = true;
    }
    Op& op = ops_[in.op - 1];
    const size_t total = padded(op.bytes), n = std::min(total - in.read, avail);
    if (n > 0) {
      const size_t real = in.read < op.bytes ? std::min(n, op.bytes - in.read) : 0;
      ring_read(op.data + in.read, ring, link_bytes_, t, real);
      in.read += n;
      tail.store(t + n, std::memory_order_release);
      moved = true;
    }
    if (in.read < total) return moved;
    op.done = true;
    --pending_;
    in.op = 0;
  }
}

bool ShmExchange::progress() {
  bool moved = false;
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    if (!sends_to_[size_t(j)].empty()) moved |= progress_send(j);
    if (incoming_[size_t(j)].op != 0 || !recvs_from_[size_t(j)].empty()) moved |= progress_recv(j);
  }
  return moved;
}

}  // namespace dit
