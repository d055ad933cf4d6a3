// ShmExchange's collectives (parallel/shm_exchange.h): all-to-all, all-gather and
// reduce-scatter, in pieces of the ranks' slots in lockstep (docs/transport.md, "Collectives").
// The segment, the waits and the progress thread: shm_exchange.cpp; messages: shm_p2p.cpp.
// Every block is a StridedBlock (parallel/strided_block.h): contiguous blocks are blocks of one row.
#include <algorithm>
#include <cstring>

#include "parallel/shm_exchange.h"
#include "parallel/sum_in_order.h"
#include "runtime/error.h"

namespace dit {

namespace {

// The part of a block of `count` elements that piece `off` carries, pieces of `piece` elements.
size_t part(size_t count, size_t off, size_t piece) { return count > off ? std::min(piece, count - off) : 0; }

}  // namespace

void ShmExchange::begin_piece(uint64_t seq, std::chrono::steady_clock::time_point deadline) {
  // Every other rank has read my slot's previous piece.
  for (int j = 0; j < size_; ++j)
    if (j != rank_) wait_for(done(j), seq - 1, j, deadline);
}

// The largest of every rank's `mine` (itself a small all-gather): an uneven exchange takes as
// many pieces as the largest block any rank sends, the same on all.
uint64_t ShmExchange::largest(uint64_t mine) {
  std::fill(one_each_.begin(), one_each_.end(), sizeof(uint64_t));
  all_gather_v(&mine, most_.data(), one_each_.data(), 1);
  return *std::max_element(most_.begin(), most_.end());
}

void ShmExchange::all_to_all(const void* send, void* recv, size_t bytes_per_rank) {
  for (size_t j = 0; j < size_t(size_); ++j) to_[j] = from_[j] = {j * bytes_per_rank, 1, bytes_per_rank, bytes_per_rank};
  exchange(static_cast<const char*>(send), static_cast<char*>(recv), bytes_per_rank);  // every rank knows B
}

void ShmExchange::all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                               size_t elem_bytes) {
  size_t sent = 0, received = 0, most = 0;
  for (size_t j = 0; j < size_t(size_); ++j) {
    const size_t s = send_counts[j] * elem_bytes, r = recv_counts[j] * elem_bytes;
    to_[j] = {sent, 1, s, s};
    from_[j] = {received, 1, r, r};
    sent += s;
    received += r;
    if (j != size_t(rank_)) most = std::max(most, s);
  }
  exchange(static_cast<const char*>(send), static_cast<char*>(recv), largest(most));
}

void ShmExchange::all_to_all_strided(const float* send, const StridedBlock* to, float* recv, const StridedBlock* from) {
  const size_t me = size_t(rank_);
  DIT_CHECK(to[me].count() == from[me].count(), "all_to_all_strided: this rank sends itself " << to[me].count()
                                                                                              << " elements but expects " << from[me].count());
  size_t most = 0;
  for (size_t j = 0; j < size_t(size_); ++j) {
    to_[j] = to[j].scaled(sizeof(float));
    from_[j] = from[j].scaled(sizeof(float));
    if (j != me) most = std::max(most, to_[j].count());
  }
  exchange(reinterpret_cast<const char*>(send), reinterpret_cast<char*>(recv), largest(most));
}

// Every all-to-all: block to_[j] of `in` goes to rank j, block from_[j] of `out` comes from
// rank j (bytes), each copied from its rows into the slot and from the slot into its rows; the
// block to itself goes straight from `in` to `out` once the others are on their way. `most`:
// the largest block any rank sends another, the same on all.
void ShmExchange::exchange(const char* in, char* out, size_t most) {
  const size_t n = size_t(size_), me = size_t(rank_);
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  const size_t piece = slot_bytes_ / n / kLine * kLine;  // per destination
  for (size_t off = 0; off < most; off += piece) {
    const uint64_t seq = ++seq_;
    begin_piece(seq, deadline);
    char* mine = slot(rank_);
    for (size_t j = 0; j < n; ++j)
      if (j != me) copy_block_parallel(in, to_[j], off, mine + j * piece, kFlat, 0, part(to_[j].count(), off, piece));
    posted(rank_).store(seq, std::memory_order_release);
    for (int k = 1; k < size_; ++k) {  // starting after this rank: the ranks do not all read one slot at once
      const size_t j = size_t((rank_ + k) % size_);
      wait_for(posted(int(j)), seq, int(j), deadline);
      copy_block_parallel(slot(int(j)) + me * piece, kFlat, 0, out, from_[j], off, part(from_[j].count(), off, piece));
    }
    done(rank_).store(seq, std::memory_order_release);
  }
  copy_block_parallel(in, to_[me], 0, out, from_[me], 0, to_[me].count());
}

// share_[j]: rank j's rows (`planes` of them) in an array of planes holding every rank's row in
// rank order, in units of `unit` bytes.
void ShmExchange::set_shares(const size_t* counts, size_t unit, size_t planes) {
  size_t at = 0;
  for (size_t j = 0; j < size_t(size_); ++j) {
    share_[j] = {at, planes, counts[j] * unit, 0};
    at += counts[j] * unit;
  }
  for (StridedBlock& b : share_) b.stride = at;
}

void ShmExchange::all_gather_v(const void* send, void* recv, const size_t* counts, size_t elem_bytes, size_t planes) {
  const size_t me = size_t(rank_);
  set_shares(counts, elem_bytes, planes);
  size_t most = 0;
  for (const StridedBlock& b : share_) most = std::max(most, b.count());
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  const char* in = static_cast<const char*>(send);  // this rank's rows, packed
  char* out = static_cast<char*>(recv);
  const size_t piece = slot_bytes_;
  for (size_t off = 0; off < most; off += piece) {
    const uint64_t seq = ++seq_;
    begin_piece(seq, deadline);
    const size_t mine = part(share_[me].count(), off, piece);
    if (mine) copy_block_parallel(in, kFlat, off, slot(rank_), kFlat, 0, mine);
    posted(rank_).store(seq, std::memory_order_release);
    copy_block_parallel(in, kFlat, off, out, share_[me], off, mine);
    for (int k = 1; k < size_; ++k) {
      const size_t j = size_t((rank_ + k) % size_);
      wait_for(posted(int(j)), seq, int(j), deadline);
      copy_block_parallel(slot(int(j)), kFlat, 0, out, share_[j], off, part(share_[j].count(), off, piece));
    }
    done(rank_).store(seq, std::memory_order_release);
  }
}

// In pieces of the slot, as the all-to-all: every rank copies the others' shares out of its
// array into its slot, then sums its own share over the ranks in rank order, reading the
// others' slots and its own array in place (one copy of each byte sent, no copy of what stays).
void ShmExchange::reduce_scatter_sum(const float* send, float* recv, const size_t* counts, size_t planes) {
  const size_t n = size_t(size_), me = size_t(rank_);
  set_shares(counts, 1, planes);  // in floats
  size_t most = 0;
  for (const StridedBlock& b : share_) most = std::max(most, b.count());
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  const size_t piece = slot_bytes_ / n / kLine * kLine / sizeof(float);  // floats per destination
  for (size_t off = 0; off < most; off += piece) {
    const uint64_t seq = ++seq_;
    begin_piece(seq, deadline);
    float* mine = reinterpret_cast<float*>(slot(rank_));
    for (size_t j = 0; j < n; ++j)
      if (j != me)
        copy_block_parallel(send, share_[j], off, mine + j * piece, kFlat, 0, part(share_[j].count(), off, piece));
    posted(rank_).store(seq, std::memory_order_release);
    for (int k = 1; k < size_; ++k) {
      const int j = (rank_ + k) % size_;
      wait_for(posted(j), seq, j, deadline);
    }
    for_each_run(share_[me], off, part(share_[me].count(), off, piece), [&](size_t at, size_t pos, size_t len) {
      for (size_t r = 0; r < n; ++r)
        sum_inputs_[r] = r == me ? send + at : reinterpret_cast<const float*>(slot(int(r))) + me * piece + pos;
      sum_in_order(sum_inputs_.data(), n, recv + off + pos, len);
    });
    done(rank_).store(seq, std::memory_order_release);
  }
}

}  // namespace dit
