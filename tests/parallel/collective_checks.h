// Checks of every collective, run by each rank of a group (ranks as threads or as
// processes). Each returns normally or throws std::runtime_error naming the first wrong
// element, so the same code serves Catch2 (threads) and worker processes (exit code).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/mesh.h"
#include "parallel/process_group.h"

namespace dit_test {

inline void expect_eq(float got, float want, const char* what, size_t i, int rank) {
  if (got != want) {
    char buf[256];
    std::snprintf(buf, sizeof(buf), "%s: rank %d element %zu: got %g, want %g", what, rank, i, double(got),
                  double(want));
    throw std::runtime_error(buf);
  }
}

// Value that rank `src` sends to rank `dst` at index i: exact in float.
inline float val(int src, int dst, size_t i) { return float(src * 100000 + dst * 1000 + int(i % 1000)); }
// Uneven split: elements rank src sends to rank dst (zero for some pairs).
inline size_t uneven(int src, int dst) { return size_t((2 * src + dst) % 4) * 3; }

inline void check_all_to_all(dit::ProcessGroup& pg, size_t n) {
  int r = pg.rank(), w = pg.size();
  std::vector<float> send(n * w), recv(n * w, -1.f);
  for (int d = 0; d < w; d++)
    for (size_t i = 0; i < n; i++) send[d * n + i] = val(r, d, i);
  pg.all_to_all(send.data(), recv.data(), n);
  for (int s = 0; s < w; s++)
    for (size_t i = 0; i < n; i++) expect_eq(recv[s * n + i], val(s, r, i), "all_to_all", s * n + i, r);
}

inline void check_all_to_all_v(dit::ProcessGroup& pg) {
  int r = pg.rank(), w = pg.size();
  std::vector<size_t> sc(w), rc(w);
  size_t st = 0, rt = 0;
  for (int j = 0; j < w; j++) {
    sc[j] = uneven(r, j);
    rc[j] = uneven(j, r);
    st += sc[j];
    rt += rc[j];
  }
  std::vector<float> send(st + 1), recv(rt + 1, -1.f);
  size_t o = 0;
  for (int d = 0; d < w; d++)
    for (size_t i = 0; i < sc[d]; i++) send[o++] = val(r, d, i);
  pg.all_to_all_v(send.data(), sc, recv.data(), rc);
  o = 0;
  for (int s = 0; s < w; s++)
    for (size_t i = 0; i < rc[s]; i++, o++) expect_eq(recv[o], val(s, r, i), "all_to_all_v", o, r);
  expect_eq(recv[rt], -1.f, "all_to_all_v (past the end)", rt, r);
}

inline void check_all_gather(dit::ProcessGroup& pg, size_t n) {
  int r = pg.rank(), w = pg.size();
  std::vector<float> send(n), recv(n * w + 1, -1.f);
  for (size_t i = 0; i < n; i++) send[i] = val(r, 0, i);
  pg.all_gather(send.data(), recv.data(), n);
  for (int s = 0; s < w; s++)
    for (size_t i = 0; i < n; i++) expect_eq(recv[s * n + i], val(s, 0, i), "all_gather", s * n + i, r);
  expect_eq(recv[n * w], -1.f, "all_gather (past the end)", n * w, r);
}

inline void check_all_gather_v(dit::ProcessGroup& pg) {
  int r = pg.rank(), w = pg.size();
  std::vector<size_t> counts(w);
  size_t total = 0;
  for (int j = 0; j < w; j++) total += counts[j] = size_t(j % 3) * 5;
  std::vector<float> send(counts[r] + 1), recv(total + 1, -1.f);
  for (size_t i = 0; i < counts[r]; i++) send[i] = val(r, 1, i);
  pg.all_gather_v(send.data(), recv.data(), counts);
  size_t o = 0;
  for (int s = 0; s < w; s++)
    for (size_t i = 0; i < counts[s]; i++, o++) expect_eq(recv[o], val(s, 1, i), "all_gather_v", o, r);
}

inline void check_all_reduce(dit::ProcessGroup& pg, size_t n) {
  int r = pg.rank(), w = pg.size();
  std::vector<float> data(n);
  for (size_t i = 0; i < n; i++) data[i] = float(r + 1) * float(i % 97);
  pg.all_reduce_sum(data.data(), n);
  float k = float(w * (w + 1) / 2);
  for (size_t i = 0; i < n; i++) expect_eq(data[i], k * float(i % 97), "all_reduce_sum", i, r);
}

inline void check_reduce_scatter(dit::ProcessGroup& pg, size_t n) {
  int r = pg.rank(), w = pg.size();
  std::vector<float> send(n * w), recv(n + 1, -1.f);
  for (int b = 0; b < w; b++)
    for (size_t i = 0; i < n; i++) send[b * n + i] = float(r + 1) * float(b * 10 + int(i % 7));
  pg.reduce_scatter_sum(send.data(), recv.data(), n);
  float k = float(w * (w + 1) / 2);
  for (size_t i = 0; i < n; i++) expect_eq(recv[i], k * float(r * 10 + int(i % 7)), "reduce_scatter_sum", i, r);
  expect_eq(recv[n], -1.f, "reduce_scatter_sum (past the end)", n, r);
}

// A value with a full mantissa (a hash of its arguments): sums of these depend on their order.
inline float rough(int r, size_t p, size_t k) {
  uint32_t h = uint32_t(r) * 2654435761u ^ uint32_t(p) * 40503u ^ uint32_t(k) * 2246822519u;
  h ^= h >> 15;
  h *= 2654435761u;
  return float(int(h % 2000001u) - 1000000) / 997.f;
}

// The strided reduce-scatter (tensor parallelism's row linears): `planes` planes of Σ counts
// elements, rank j's share at counts[0] + ... + counts[j-1] of each, summed in rank order
// (compared bit for bit with the sum in that order).
inline void check_reduce_scatter_v(dit::ProcessGroup& pg, size_t planes, const std::vector<size_t>& counts) {
  const int r = pg.rank(), w = pg.size();
  size_t total = 0, at = 0;
  for (int j = 0; j < w; j++) {
    if (j < r) at += counts[size_t(j)];
    total += counts[size_t(j)];
  }
  const size_t mine = counts[size_t(r)];
  std::vector<float> send(planes * total + 1), recv(planes * mine + 1, -1.f);
  for (size_t p = 0; p < planes; p++)
    for (size_t k = 0; k < total; k++) send[p * total + k] = rough(r, p, k);
  pg.reduce_scatter_sum_v(send.data(), recv.data(), counts, planes);
  for (size_t p = 0; p < planes; p++)
    for (size_t i = 0; i < mine; i++) {
      float want = rough(0, p, at + i);
      for (int s = 1; s < w; s++) want += rough(s, p, at + i);
      expect_eq(recv[p * mine + i], want, "reduce_scatter_sum_v", p * mine + i, r);
    }
  expect_eq(recv[planes * mine], -1.f, "reduce_scatter_sum_v (past the end)", planes * mine, r);
}

// The strided all-gather (the token rows of every batch item, in place).
inline void check_all_gather_planes(dit::ProcessGroup& pg, size_t planes, const std::vector<size_t>& counts) {
  const int r = pg.rank(), w = pg.size();
  size_t total = 0;
  for (int j = 0; j < w; j++) total += counts[size_t(j)];
  const size_t mine = counts[size_t(r)];
  std::vector<float> send(planes * mine + 1), recv(planes * total + 1, -1.f);
  for (size_t p = 0; p < planes; p++)
    for (size_t i = 0; i < mine; i++) send[p * mine + i] = rough(r, p, i);
  pg.all_gather_v(send.data(), recv.data(), counts, planes);
  for (size_t p = 0; p < planes; p++)
    for (int s = 0, at = 0; s < w; at += int(counts[size_t(s)]), s++)
      for (size_t i = 0; i < counts[size_t(s)]; i++)
        expect_eq(recv[p * total + size_t(at) + i], rough(s, p, i), "all_gather_v (planes)", p * total + size_t(at) + i, r);
  expect_eq(recv[planes * total], -1.f, "all_gather_v (planes, past the end)", planes * total, r);
}

// The strided all-to-all (Ulysses' heads of every token row): the block from rank s to rank d
// is rows × width of s's array with gaps between the rows; d receives it as width × rows rows
// (the same elements in the same order, another shape) with gaps of its own. `big` makes the
// blocks span several pieces of a shared-memory slot. Gaps must stay untouched.
inline void check_all_to_all_strided(dit::ProcessGroup& pg, bool big) {
  const int r = pg.rank(), w = pg.size();
  const size_t unit = big ? 700 : 1;
  auto rows = [&](int s, int d) { return size_t(2 + (s + d) % 3) * unit; };
  auto width = [&](int s, int d) { return size_t(3 + (2 * s + d) % 4) * (big ? 64 : 1); };
  auto span = [&](size_t n_rows, size_t stride) { return n_rows * stride; };
  std::vector<dit::StridedBlock> to, from;
  size_t send_size = 0, recv_size = 0;
  for (int j = 0; j < w; j++) {
    const dit::StridedBlock t{send_size, rows(r, j), width(r, j), width(r, j) + 5};
    to.push_back(t);
    send_size += span(t.rows, t.stride) + 7;
    const dit::StridedBlock f{recv_size, width(j, r), rows(j, r), rows(j, r) + 3};  // transposed shape
    from.push_back(f);
    recv_size += span(f.rows, f.stride) + 7;
  }
  std::vector<float> send(send_size, -2.f), recv(recv_size, -1.f);
  for (int j = 0; j < w; j++)
    for (size_t i = 0; i < to[size_t(j)].count(); i++) send[to[size_t(j)].at(i)] = val(r, j, i);
  pg.all_to_all_strided(send.data(), to, recv.data(), from);
  std::vector<bool> written(recv_size, false);
  for (int s = 0; s < w; s++)
    for (size_t i = 0; i < from[size_t(s)].count(); i++) {
      const size_t at = from[size_t(s)].at(i);
      written[at] = true;
      expect_eq(recv[at], val(s, r, i), "all_to_all_strided", at, r);
    }
  for (size_t i = 0; i < recv_size; i++)
    if (!written[i]) expect_eq(recv[i], -1.f, "all_to_all_strided (a gap)", i, r);
}

// Uneven shares, one of them empty when there are three ranks or more.
inline std::vector<size_t> uneven_shares(int w, size_t unit) {
  std::vector<size_t> c;
  for (int j = 0; j < w; j++) c.push_back(size_t((j + 1) % 3) * unit + (j == 0 ? 1 : 0));
  return c;
}

inline void check_broadcast(dit::ProcessGroup& pg, size_t n) {
  int r = pg.rank(), w = pg.size();
  int root = w - 1;
  std::vector<float> data(n);
  for (size_t i = 0; i < n; i++) data[i] = r == root ? val(root, 7, i) : -1.f;
  pg.broadcast(data.data(), n, root);
  for (size_t i = 0; i < n; i++) expect_eq(data[i], val(root, 7, i), "broadcast", i, r);
}

// Ring exchange as ring attention does it: double-buffered, post send and recv, then wait.
inline void check_ring_p2p(dit::ProcessGroup& pg, size_t n, int steps) {
  int r = pg.rank(), w = pg.size();
  if (w == 1) return;
  int next = (r + 1) % w, prev = (r + w - 1) % w;
  std::vector<float> buf[2] = {std::vector<float>(n), std::vector<float>(n)};
  for (size_t i = 0; i < n; i++) buf[0][i] = val(r, 0, i);
  int holder = r;  // whose block buf[cur] holds
  for (int s = 0; s < steps; s++) {
    int cur = s % 2, nxt = 1 - cur;
    auto sh = pg.isend(buf[cur].data(), n * sizeof(float), next, uint32_t(s));
    auto rh = pg.irecv(buf[nxt].data(), n * sizeof(float), prev, uint32_t(s));
    for (size_t i = 0; i < n; i++) expect_eq(buf[cur][i], val(holder, 0, i), "ring p2p (current block)", i, r);
    sh.wait();
    rh.wait();
    holder = (holder + w - 1) % w;
    for (size_t i = 0; i < n; i++) expect_eq(buf[nxt][i], val(holder, 0, i), "ring p2p (received block)", i, r);
  }
}

// Windows: on shared memory every rank writes a block per use that every other rank reads in
// place, over several uses (a rank may be a use ahead: begin waits for the readers) and a
// window that grows between them; a smaller request keeps it. Over TCP there is none.
inline void check_windows(dit::ProcessGroup& pg) {
  const int r = pg.rank(), w = pg.size();
  const bool want = w > 1 && pg.uses_shared_memory() && !std::getenv("DIT_NO_SHM_WINDOWS");
  size_t n = 1000;
  if (pg.ensure_window(n * sizeof(float)) != want)
    throw std::runtime_error("ensure_window: got " + std::to_string(!want) + " (" + pg.window_note() + ")");
  if (!want) return;
  for (int use = 0; use < 6; ++use) {
    if (use == 3) {  // grow (every rank alike) past 2 MB (parallel/shm_mapping.h), then ask for less: the larger one stays
      n = 600003;
      if (!pg.ensure_window(n * sizeof(float)) || !pg.ensure_window(16)) throw std::runtime_error("ensure_window failed");
    }
    float* mine = pg.window_begin();
    for (size_t i = 0; i < n; ++i) mine[i] = val(r, use, i);
    pg.window_publish();
    for (int k = 0; k < w; ++k) {
      const int j = (r + k) % w;
      const float* theirs = pg.window_peer(j);
      for (size_t i = 0; i < n; i += 7) expect_eq(theirs[i], val(j, use, i), "window", i, r);
    }
    pg.window_release();
  }
}

inline void check_everything(dit::ProcessGroup& pg) {
  for (size_t n : {size_t(0), size_t(1), size_t(5), size_t(4096)}) check_all_to_all(pg, n);
  check_all_to_all_v(pg);
  for (size_t n : {size_t(0), size_t(3), size_t(1000)}) check_all_gather(pg, n);
  check_all_gather_v(pg);
  for (size_t n : {size_t(0), size_t(1), size_t(1000), size_t(300000)}) check_all_reduce(pg, n);
  for (size_t n : {size_t(0), size_t(1), size_t(777)}) check_reduce_scatter(pg, n);
  check_all_to_all_strided(pg, false);
  for (size_t planes : {size_t(1), size_t(3)}) {
    check_reduce_scatter_v(pg, planes, uneven_shares(pg.size(), 37));
    check_all_gather_planes(pg, planes, uneven_shares(pg.size(), 37));
  }
  for (size_t n : {size_t(0), size_t(1), size_t(10000)}) check_broadcast(pg, n);
  pg.barrier();
  check_ring_p2p(pg, 1000, 2 * pg.size() + 1);
  check_ring_p2p(pg, 0, 2);
  check_windows(pg);
  pg.barrier();
}

// Every group of a mesh: all-gather the global ranks and compare with the layout.
inline void check_mesh_groups(dit::DeviceMesh& mesh) {
  const dit::MeshLayout& l = mesh.layout();
  for (const dit::GroupDef& def : dit::mesh_groups()) {
    dit::ProcessGroup& pg = mesh.group(def.group);
    const std::vector<int>& want = l.group(def.group);
    float me = float(pg.global_rank());
    std::vector<float> got(pg.size());
    pg.all_gather(&me, got.data(), 1);
    for (size_t i = 0; i < got.size(); i++) expect_eq(got[i], float(want[i]), def.name, i, mesh.world().rank());
    std::vector<float> sum(3, 1.f);
    pg.all_reduce_sum(sum.data(), 3);
    expect_eq(sum[0], float(pg.size()), def.name, 0, mesh.world().rank());
  }
}

}  // namespace dit_test
