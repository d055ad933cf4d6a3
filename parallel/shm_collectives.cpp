// ShmExchange's collectives (parallel/shm_exchange.h): all-to-all, all-gather and
// reduce-scatter, in pieces of the ranks' slots in lockstep (docs/transport.md, "Collectives").
// The segment, the waits and the progress thread: shm_exchange.cpp; messages: shm_p2p.cpp.
#include <algorithm>
#include <cstring>

#include "parallel/shm_exchange.h"
#include "runtime/error.h"

namespace dit {

namespace {

// A rank's block of `planes` rows, each `row` long and `stride` apart in the strided array:
// visits the part [off, off + n) of the block (as if packed) row by row, f(offset in the
// strided array, offset from off, length). Units are the caller's (bytes or floats).
template <class F>
void for_rows(size_t off, size_t n, size_t row, size_t stride, F&& f) {
  for (size_t done = 0; done < n;) {
    const size_t at = off + done, in = at % row, len = std::min(n - done, row - in);
    f(at / row * stride + in, done, len);
    done += len;
  }
}

// sum[i] = ((x[0][i] + x[1][i]) + x[2][i]) + ... for n >= 2 arrays; sum may be one of them
// (a rank's share of an all-reduce, summed in place).
void sum_in_order(const float* const* x, size_t n, float* sum, size_t len) {
  if (n == 2) {  // each element read before it is written
    for (size_t i = 0; i < len; ++i) sum[i] = x[0][i] + x[1][i];
    return;
  }
  constexpr size_t kBlock = 1024;
  float acc[kBlock];
  for (size_t b = 0; b < len; b += kBlock) {
    const size_t m = std::min(kBlock, len - b);
    for (size_t i = 0; i < m; ++i) acc[i] = x[0][b + i] + x[1][b + i];
    for (size_t r = 2; r < n; ++r)
      for (size_t i = 0; i < m; ++i) acc[i] += x[r][b + i];
    std::memcpy(sum + b, acc, m * sizeof(float));
  }
}

}  // namespace

void ShmExchange::begin_piece(uint64_t seq, std::chrono::steady_clock::time_point deadline) {
  // Every other rank has read my slot's previous piece.
  for (int j = 0; j < size_; ++j)
    if (j != rank_) wait_for(done(j), seq - 1, j, deadline);
}

void ShmExchange::all_to_all(const void* send, void* recv, size_t bytes_per_rank) {
  for (size_t j = 0; j < size_t(size_); ++j) {
    send_bytes_[j] = recv_bytes_[j] = bytes_per_rank;
    send_at_[j] = recv_at_[j] = j * bytes_per_rank;
  }
  exchange_blocks(send, recv, bytes_per_rank);  // every rank knows the largest block: B
}

void ShmExchange::all_to_all_v(const void* send, const size_t* send_counts, void* recv, const size_t* recv_counts,
                               size_t elem_bytes) {
  const size_t n = size_t(size_);
  for (size_t j = 0; j < n; ++j) {
    send_bytes_[j] = send_counts[j] * elem_bytes;
    recv_bytes_[j] = recv_counts[j] * elem_bytes;
    send_at_[j] = j == 0 ? 0 : send_at_[j - 1] + send_bytes_[j - 1];
    recv_at_[j] = j == 0 ? 0 : recv_at_[j - 1] + recv_bytes_[j - 1];
  }
  // The number of pieces follows from the largest block anyone sends: agreed first.
  uint64_t most = *std::max_element(send_bytes_.begin(), send_bytes_.end());
  std::fill(one_each_.begin(), one_each_.end(), sizeof(uint64_t));
  all_gather_v(&most, most_.data(), one_each_.data(), 1);
  exchange_blocks(send, recv, *std::max_element(most_.begin(), most_.end()));
}

// The all-to-all's pieces (send_bytes_[j] from send + send_at_[j] to rank j, recv_bytes_[j]
// from rank j to recv + recv_at_[j]); `most`: the largest block of any rank, the same on all.
void ShmExchange::exchange_blocks(const void* send, void* recv, size_t most) {
  if (most == 0) return;
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const size_t piece = slot_bytes_ / size_t(size_) / kLine * kLine;  // per destination
  auto part = [&](size_t n, size_t off) { return n > off ? std::min(piece, n - off) : size_t(0); };
  const size_t me = size_t(rank_);
  for (size_t off = 0; off < most; off += piece) {
    const uint64_t seq = ++seq_;
    begin_piece(seq, deadline);
    char* mine = slot(rank_);
    for (size_t j = 0; j < size_t(size_); ++j)
      if (j != me)
        if (const size_t n = part(send_bytes_[j], off)) std::memcpy(mine + j * piece, in + send_at_[j] + off, n);
    posted(rank_).store(seq, std::memory_order_release);
    if (const size_t n = part(recv_bytes_[me], off)) std::memmove(out + recv_at_[me] + off, in + send_at_[me] + off, n);
    for (int k = 1; k < size_; ++k) {  // starting after this rank: the ranks do not all read one slot at once
      const size_t j = size_t((rank_ + k) % size_);
      wait_for(posted(int(j)), seq, int(j), deadline);
      if (const size_t n = part(recv_bytes_[j], off)) std::memcpy(out + recv_at_[j] + off, slot(int(j)) + me * piece, n);
    }
    done(rank_).store(seq, std::memory_order_release);
  }
}

void ShmExchange::all_gather_v(const void* send, void* recv, const size_t* counts, size_t elem_bytes, size_t planes) {
  const size_t n = size_t(size_), me = size_t(rank_);
  std::vector<size_t>&row = gather_bytes_, &at = gather_at_;  // preallocated: no allocation here
  size_t most = 0;
  for (size_t j = 0; j < n; ++j) {
    row[j] = counts[j] * elem_bytes;
    at[j] = j == 0 ? 0 : at[j - 1] + row[j - 1];
    most = std::max(most, row[j] * planes);
  }
  if (most == 0) return;
  const size_t stride = at[n - 1] + row[n - 1];  // a plane of recv
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const size_t piece = slot_bytes_;
  auto part = [&](size_t j, size_t off) { return row[j] * planes > off ? std::min(piece, row[j] * planes - off) : size_t(0); };
  for (size_t off = 0; off < most; off += piece) {
    const uint64_t seq = ++seq_;
    begin_piece(seq, deadline);
    const size_t mine = part(me, off);
    if (mine) std::memcpy(slot(rank_), in + off, mine);
    posted(rank_).store(seq, std::memory_order_release);
    for_rows(off, mine, row[me], stride,
             [&](size_t to, size_t from, size_t len) { std::memmove(out + at[me] + to, in + off + from, len); });
    for (int k = 1; k < size_; ++k) {
      const size_t j = size_t((rank_ + k) % size_);
      wait_for(posted(int(j)), seq, int(j), deadline);
      const char* theirs = slot(int(j));
      for_rows(off, part(j, off), row[j], stride,
               [&](size_t to, size_t from, size_t len) { std::memcpy(out + at[j] + to, theirs + from, len); });
    }
    done(rank_).store(seq, std::memory_order_release);
  }
}

// As the uneven all-to-all, with each block copied straight from its rows in send into the slot
// and from the slot into its rows in recv; the block to itself goes from send to recv directly.
void ShmExchange::all_to_all_strided(const float* send, const StridedBlock* to, float* recv, const StridedBlock* from) {
  const size_t n = size_t(size_), me = size_t(rank_);
  DIT_CHECK(to[me].count() == from[me].count(), "all_to_all_strided: this rank sends itself " << to[me].count()
                                                                                              << " elements but expects " << from[me].count());
  uint64_t most = 0;  // the number of pieces follows from the largest block anyone sends: agreed first
  for (size_t j = 0; j < n; ++j)
    if (j != me) most = std::max<uint64_t>(most, to[j].count());
  std::fill(one_each_.begin(), one_each_.end(), sizeof(uint64_t));
  all_gather_v(&most, most_.data(), one_each_.data(), 1);
  most = *std::max_element(most_.begin(), most_.end());
  copy_block(send, to[me], 0, recv, from[me], 0, to[me].count());
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  const size_t piece = slot_bytes_ / n / kLine * kLine / sizeof(float);  // floats per destination
  auto part = [&](size_t count, size_t off) { return count > off ? std::min(piece, count - off) : size_t(0); };
  for (size_t off = 0; off < most; off += piece) {
    const uint64_t seq = ++seq_;
    begin_piece(seq, deadline);
    float* mine = reinterpret_cast<float*>(slot(rank_));
    for (size_t j = 0; j < n; ++j)
      if (j != me) copy_block(send, to[j], off, mine + j * piece, kFlat, 0, part(to[j].count(), off));
    posted(rank_).store(seq, std::memory_order_release);
    for (int k = 1; k < size_; ++k) {
      const size_t j = size_t((rank_ + k) % size_);
      wait_for(posted(int(j)), seq, int(j), deadline);
      const float* theirs = reinterpret_cast<const float*>(slot(int(j))) + me * piece;
      copy_block(theirs, kFlat, 0, recv, from[j], off, part(from[j].count(), off));
    }
    done(rank_).store(seq, std::memory_order_release);
  }
}

// In pieces of the slot, as the all-to-all: every rank copies the others' shares out of its
// array into its slot, then sums its own share over the ranks in rank order, reading the
// others' slots and its own array in place (one copy of each byte sent, no copy of what stays).
void ShmExchange::reduce_scatter_sum(const float* send, float* recv, const size_t* counts, size_t planes) {
  const size_t n = size_t(size_), me = size_t(rank_);
  std::vector<size_t>&row = gather_bytes_, &at = gather_at_;  // in floats here
  size_t most = 0;
  for (size_t j = 0; j < n; ++j) {
    row[j] = counts[j];
    at[j] = j == 0 ? 0 : at[j - 1] + row[j - 1];
    most = std::max(most, row[j] * planes);
  }
  if (most == 0) return;
  const size_t stride = at[n - 1] + row[n - 1];  // a plane of send
  const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
  const size_t piece = slot_bytes_ / n / kLine * kLine / sizeof(float);  // floats per destination
  auto part = [&](size_t j, size_t off) { return row[j] * planes > off ? std::min(piece, row[j] * planes - off) : size_t(0); };
  for (size_t off = 0; off < most; off += piece) {
    const uint64_t seq = ++seq_;
    begin_piece(seq, deadline);
    float* mine = reinterpret_cast<float*>(slot(rank_));
    for (size_t j = 0; j < n; ++j)
      if (j != me)
        for_rows(off, part(j, off), row[j], stride, [&](size_t from, size_t to, size_t len) {
          std::memcpy(mine + j * piece + to, send + at[j] + from, len * sizeof(float));
        });
    posted(rank_).store(seq, std::memory_order_release);
    for (int k = 1; k < size_; ++k) {
      const int j = (rank_ + k) % size_;
      wait_for(posted(j), seq, j, deadline);
    }
    for_rows(off, part(me, off), row[me], stride, [&](size_t from, size_t to, size_t len) {
      for (size_t r = 0; r < n; ++r)
        shares_[r] = r == me ? send + at[me] + from : reinterpret_cast<const float*>(slot(int(r))) + me * piece + to;
      sum_in_order(shares_.data(), n, recv + off + to, len);
    });
    done(rank_).store(seq, std::memory_order_release);
  }
}

}  // namespace dit
