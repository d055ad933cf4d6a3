// ProcessGroup's collectives: all-to-all, all-gather, all-reduce, reduce-scatter, broadcast and
// barriers, over shared memory when the group has a segment (parallel/shm_exchange.h), else
// over Gloo (TCP). Connection, failure handling and point-to-point messages: process_group.cpp.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/types.h>

#include "parallel/process_group_internal.h"
#include "parallel/shm_exchange.h"
#include "parallel/shm_mapping.h"

namespace dit {

void ProcessGroup::all_to_all_bytes(const void* send, void* recv, size_t bytes_per_rank) {
  check_usable("all_to_all");
  uint32_t tag = next_tag();
  if (bytes_per_rank == 0) return;
  if (size() == 1) {
    std::memmove(recv, send, bytes_per_rank);
    return;
  }
  DIT_CHECK(send != recv, "all_to_all: send and recv must be different buffers");
  if (shm_) return run("all_to_all", -1, [&] { shm_->all_to_all(send, recv, bytes_per_rank); });
  run("all_to_all", -1, [&] {
    gloo::AlltoallOptions opts(ctx_);
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(send)), bytes_per_rank * size());
    opts.setOutput(static_cast<uint8_t*>(recv), bytes_per_rank * size());
    opts.setTag(tag);
    opts.setTimeout(shared_->timeout);
    gloo::alltoall(opts);
  });
}

void ProcessGroup::all_to_all(const float* send, float* recv, size_t count_per_rank) {
  all_to_all_bytes(send, recv, count_per_rank * sizeof(float));
}

void ProcessGroup::all_to_all_v(const float* send, const std::vector<size_t>& send_counts, float* recv,
                                const std::vector<size_t>& recv_counts) {
  check_usable("all_to_all_v");
  uint32_t tag = next_tag();
  DIT_CHECK(int(send_counts.size()) == size() && int(recv_counts.size()) == size(),
            "all_to_all_v on group '" << name_ << "': " << send_counts.size() << " send counts and "
                                      << recv_counts.size() << " recv counts for " << size() << " ranks");
  DIT_CHECK(send_counts[rank_] == recv_counts[rank_],
            "all_to_all_v on group '" << name_ << "': this rank sends itself " << send_counts[rank_]
                                      << " elements but expects " << recv_counts[rank_]);
  if (size() == 1) {
    if (send_counts[0]) std::memmove(recv, send, send_counts[0] * sizeof(float));
    return;
  }
  if (shm_)
    return run("all_to_all_v", -1,
               [&] { shm_->all_to_all_v(send, send_counts.data(), recv, recv_counts.data(), sizeof(float)); });
  std::vector<int64_t> sc(send_counts.begin(), send_counts.end()), rc(recv_counts.begin(), recv_counts.end());
  run("all_to_all_v", -1, [&] {
    gloo::AlltoallvOptions opts(ctx_);
    opts.setInput(const_cast<float*>(send), sc);
    opts.setOutput(recv, rc);
    opts.setTag(tag);
    opts.setTimeout(shared_->timeout);
    gloo::alltoallv(opts);
  });
}

void ProcessGroup::all_to_all_strided(const float* send, const std::vector<StridedBlock>& to, float* recv,
                                      const std::vector<StridedBlock>& from) {
  check_usable("all_to_all");
  const size_t n = size_t(size()), me = size_t(rank_);
  DIT_CHECK(to.size() == n && from.size() == n,
            "all_to_all on group '" << name_ << "': " << to.size() << " send and " << from.size() << " receive blocks for "
                                    << n << " ranks");
  DIT_CHECK(to[me].count() == from[me].count(), "all_to_all on group '" << name_ << "': this rank sends itself "
                                                                       << to[me].count() << " elements but expects "
                                                                       << from[me].count());
  if (n == 1) return copy_block(send, to[0], 0, recv, from[0], 0, to[0].count());
  if (shm_) return run("all_to_all", -1, [&] { shm_->all_to_all_strided(send, to.data(), recv, from.data()); });
  // TCP: the blocks packed per destination, an uneven all-to-all, unpacked (the own block directly).
  tcp_send_counts_.assign(n, 0);
  tcp_recv_counts_.assign(n, 0);
  size_t sent = 0, received = 0;
  for (size_t j = 0; j < n; ++j)
    if (j != me) {
      sent += tcp_send_counts_[j] = to[j].count();
      received += tcp_recv_counts_[j] = from[j].count();
    }
  if (scratch_.size() < sent + 1) scratch_.resize(sent + 1);
  if (scratch2_.size() < received + 1) scratch2_.resize(received + 1);
  for (size_t j = 0, at = 0; j < n; at += tcp_send_counts_[j], ++j)
    copy_block_parallel(send, to[j], 0, scratch_.data() + at, kFlat, 0, tcp_send_counts_[j]);
  copy_block_parallel(send, to[me], 0, recv, from[me], 0, to[me].count());
  all_to_all_v(scratch_.data(), tcp_send_counts_, scratch2_.data(), tcp_recv_counts_);
  for (size_t j = 0, at = 0; j < n; at += tcp_recv_counts_[j], ++j)
    copy_block_parallel(scratch2_.data() + at, kFlat, 0, recv, from[j], 0, tcp_recv_counts_[j]);
}

void ProcessGroup::all_gather_bytes(const void* send, void* recv, size_t bytes) {
  check_usable("all_gather");
  uint32_t tag = next_tag();
  if (bytes == 0) return;
  if (size() == 1) {
    std::memmove(recv, send, bytes);
    return;
  }
  if (shm_) {
    std::fill(shm_counts_.begin(), shm_counts_.end(), bytes);
    return run("all_gather", -1, [&] { shm_->all_gather_v(send, recv, shm_counts_.data(), 1); });
  }
  run("all_gather", -1, [&] {
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(send)), bytes);
    opts.setOutput(static_cast<uint8_t*>(recv), bytes * size());
    opts.setTag(tag);
    opts.setTimeout(shared_->timeout);
    gloo::allgather(opts);
  });
}

void ProcessGroup::all_gather(const float* send, float* recv, size_t count) {
  all_gather_bytes(send, recv, count * sizeof(float));
}

template <class T>
void ProcessGroup::all_gather_v_any(const T* send, T* recv, const std::vector<size_t>& recv_counts, size_t planes) {
  check_usable("all_gather_v");
  uint32_t tag = next_tag();
  DIT_CHECK(int(recv_counts.size()) == size(),
            "all_gather_v on group '" << name_ << "': " << recv_counts.size() << " counts for " << size() << " ranks");
  const size_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), size_t(0));
  if (total == 0 || planes == 0) return;
  if (size() == 1) {
    std::memmove(recv, send, planes * total * sizeof(T));
    return;
  }
  if (shm_)
    return run("all_gather_v", -1, [&] { shm_->all_gather_v(send, recv, recv_counts.data(), sizeof(T), planes); });
  T* packed = recv;  // [rank][planes][count of rank]
  if (planes > 1) {  // staged in scratch_ (floats: room for planes·total of T)
    const size_t floats = (planes * total * sizeof(T) + sizeof(float) - 1) / sizeof(float);
    if (scratch_.size() < floats) scratch_.resize(floats);
    packed = reinterpret_cast<T*>(scratch_.data());
  }
  tcp_recv_counts_.resize(size_t(size()));
  for (size_t j = 0; j < size_t(size()); ++j) tcp_recv_counts_[j] = planes * recv_counts[j];
  run("all_gather_v", -1, [&] {
    gloo::AllgathervOptions opts(ctx_);
    opts.setInput(const_cast<T*>(send), tcp_recv_counts_[size_t(rank_)]);
    opts.setOutput(packed, tcp_recv_counts_);
    opts.setTag(tag);
    opts.setTimeout(shared_->timeout);
    gloo::allgatherv(opts);
  });
  if (planes == 1) return;
  for (size_t j = 0, at = 0, from = 0; j < size_t(size()); from += tcp_recv_counts_[j], at += recv_counts[j], ++j)
    copy_block_parallel(packed + from, kFlat, 0, recv, {at, planes, recv_counts[j], total}, 0, tcp_recv_counts_[j]);
}

void ProcessGroup::all_gather_v(const float* send, float* recv, const std::vector<size_t>& recv_counts, size_t planes) {
  all_gather_v_any(send, recv, recv_counts, planes);
}
void ProcessGroup::all_gather_v(const uint16_t* send, uint16_t* recv, const std::vector<size_t>& recv_counts,
                                size_t planes) {
  all_gather_v_any(send, recv, recv_counts, planes);
}

void ProcessGroup::all_reduce_sum(float* data, size_t count) {
  check_usable("all_reduce_sum");
  uint32_t tag = next_tag();
  if (count == 0 || size() == 1) return;
  if (shm_) return all_reduce_sum_shm(data, count);
  run("all_reduce_sum", -1, [&] {
    gloo::AllreduceOptions opts(ctx_);
    opts.setOutput(data, count);
    void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
    opts.setReduceFunction(fn);
    opts.setTag(tag);
    opts.setTimeout(shared_->timeout);
    gloo::allreduce(opts);
  });
}

// Over shared memory: a reduce-scatter of even blocks (the last ones shorter) in place, each
// summed over the ranks in rank order, and an all-gather of the sums. Every element is summed
// once, in one order, so every rank gets the same bits.
void ProcessGroup::all_reduce_sum_shm(float* data, size_t count) {
  const size_t n = size_t(size()), per = (count + n - 1) / n;
  for (size_t j = 0; j < n; ++j) shm_counts_[j] = std::min(per, count - std::min(count, j * per));
  float* mine = data + std::min(count, size_t(rank_) * per);
  run("all_reduce_sum", -1, [&] {
    shm_->reduce_scatter_sum(data, mine, shm_counts_.data(), 1);
    shm_->all_gather_v(mine, data, shm_counts_.data(), sizeof(float));
  });
}

void ProcessGroup::reduce_scatter_sum(const float* send, float* recv, size_t count_per_rank) {
  if (shm_counts_.size() != size_t(size())) shm_counts_.assign(size_t(size()), 0);
  std::fill(shm_counts_.begin(), shm_counts_.end(), count_per_rank);
  reduce_scatter_sum_v(send, recv, shm_counts_);
}

void ProcessGroup::reduce_scatter_sum_v(const float* send, float* recv, const std::vector<size_t>& counts,
                                        size_t planes) {
  check_usable("reduce_scatter_sum");
  DIT_CHECK(int(counts.size()) == size(),
            "reduce_scatter_sum on group '" << name_ << "': " << counts.size() << " counts for " << size() << " ranks");
  const size_t n = size_t(size()), me = size_t(rank_), mine = counts[me];
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  if (total == 0 || planes == 0) return;
  if (n == 1) {
    std::memmove(recv, send, planes * total * sizeof(float));
    return;
  }
  if (shm_) return run("reduce_scatter_sum", -1, [&] { shm_->reduce_scatter_sum(send, recv, counts.data(), planes); });
  // TCP: an all-to-all of the shares (packed per destination when strided), then the sum in
  // rank order. The same traffic as a ring reduce-scatter; Gloo 0.5 has none with options and
  // timeouts.
  const float* packed = send;
  if (scratch2_.size() < n * planes * mine) scratch2_.resize(n * planes * mine);
  if (planes > 1) {
    if (scratch_.size() < planes * total) scratch_.resize(planes * total);
    for (size_t j = 0, at = 0; j < n; at += counts[j], ++j)  // [rank][planes][share of rank]
      copy_block_parallel(send, {at, planes, counts[j], total}, 0, scratch_.data() + planes * at, kFlat, 0,
                          planes * counts[j]);
    packed = scratch_.data();
  }
  tcp_send_counts_.resize(n);
  tcp_recv_counts_.resize(n);
  for (size_t j = 0; j < n; ++j) {
    tcp_send_counts_[j] = planes * counts[j];
    tcp_recv_counts_[j] = planes * mine;
  }
  all_to_all_v(packed, tcp_send_counts_, scratch2_.data(), tcp_recv_counts_);
  const size_t m = planes * mine;
  if (m == 0) return;
  const float* s = scratch2_.data();
  for (size_t i = 0; i < m; ++i) recv[i] = s[i] + s[m + i];
  for (size_t r = 2; r < n; ++r)
    for (size_t i = 0; i < m; ++i) recv[i] += s[r * m + i];
}

void ProcessGroup::broadcast_bytes(void* data, size_t bytes, int root) {
  check_usable("broadcast");
  uint32_t tag = next_tag();
  DIT_CHECK(root >= 0 && root < size(), "broadcast on group '" << name_ << "': root " << root
                                                               << " is not a rank of " << size());
  if (bytes == 0 || size() == 1) return;
  run("broadcast", root, [&] {
    gloo::BroadcastOptions opts(ctx_);
    if (rank_ == root) opts.setInput(static_cast<uint8_t*>(data), bytes);
    opts.setOutput(static_cast<uint8_t*>(data), bytes);
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(shared_->timeout);
    gloo::broadcast(opts);
  });
}

void ProcessGroup::broadcast(float* data, size_t count, int root) {
  broadcast_bytes(data, count * sizeof(float), root);
}

void ProcessGroup::barrier() { barrier_with(shared_->timeout); }

void ProcessGroup::barrier_for_work() { barrier_with(std::chrono::hours(24 * 30)); }

void ProcessGroup::barrier_with(std::chrono::milliseconds timeout) {
  check_usable("barrier");
  uint32_t tag = next_tag();
  if (size() == 1) return;
  run("barrier", -1, [&] {
    gloo::BarrierOptions opts(ctx_);
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  });
}

// ---------------------------------------------------------------- windows

bool ProcessGroup::ensure_window(size_t bytes) {
  check_usable("window");
  next_tag();
  if (!windows_allowed()) {  // the same on every rank (one environment)
    window_note_ = !shm_ ? (size() == 1 ? "" : "not on shared memory") : "turned off by DIT_NO_SHM_WINDOWS";
    return false;
  }
  if (bytes <= shm_->window_bytes()) return true;
  bool made = false;
  run("window", -1, [&] {
    gloo::rendezvous::PrefixStore store(store_prefix_ + "/window" + std::to_string(windows_made_++), *shared_->store);
    made = shm_->ensure_window(store, bytes, [this](bool ok) { return all_ranks_agree(ok); }, &window_note_);
  });
  // On shared memory, not turned off, and still none (a small /dev/shm): say so once per group.
  if (!made && rank_ == 0 && !window_warned_) {
    window_warned_ = true;
    std::fprintf(stderr,
                 "warning: group '%s' has no shared-memory windows of %zu bytes a rank (%s): what its ranks would "
                 "read in place goes another way (messages, or a layout's smaller windows)\n",
                 name_.c_str(), bytes, window_note_.c_str());
  }
  return made;
}

bool ProcessGroup::windows_allowed() const {
  return shm_ && !shm_switch_set("DIT_NO_SHM_WINDOWS");
}

size_t ProcessGroup::window_bytes() const { return shm_ ? shm_->window_bytes() : 0; }

float* ProcessGroup::window_begin() {
  check_usable("window");
  DIT_CHECK(shm_ && shm_->window_bytes() > 0, "window on group '" << name_ << "': no window (ensure_window first)");
  float* p = nullptr;
  run("window (waiting for the ranks to finish reading the last one)", -1,
      [&] { p = reinterpret_cast<float*>(shm_->window_begin()); });
  return p;
}

void ProcessGroup::window_publish() { shm_->window_publish(); }

const float* ProcessGroup::window_peer(int j) {
  const float* p = nullptr;
  run("window", j, [&] { p = reinterpret_cast<const float*>(shm_->window_peer(j)); });
  return p;
}

void ProcessGroup::window_release() { shm_->window_release(); }

float* ProcessGroup::window_shared(int j) { return reinterpret_cast<float*>(shm_->window_shared(j)); }

void ProcessGroup::window_wait(std::atomic<uint64_t>& counter, uint64_t target) {
  run("window (waiting for the ranks' shared tasks)", -1, [&] { shm_->window_wait(counter, target); });
}

}  // namespace dit
