// The shared-memory transport of a group on one machine (parallel/shm_exchange.h): data larger
// than a slot or a link (several pieces, wrapping rings), odd sizes, receives posted out of
// order, two ranks waiting on their own sends first, the same bytes as TCP; and failures:
// a rank killed while the others wait in shared memory is named within the timeout.
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstring>

#include "collective_checks.h"
#include "parallel/process_group.h"
#include "parallel/shm_exchange.h"
#include "process_util.h"
#include "runtime/error.h"
#include "thread_ranks.h"

using namespace dit;
using namespace std::chrono_literals;

namespace {

// Byte i of what rank `src` sends to rank `dst` in message `m`.
uint8_t byte_of(int src, int dst, int m, size_t i) { return uint8_t(src * 31 + dst * 7 + m * 13 + int(i % 251)); }

void fill(std::vector<uint8_t>& v, size_t at, size_t n, int src, int dst, int m) {
  for (size_t i = 0; i < n; ++i) v[at + i] = byte_of(src, dst, m, i);
}

void expect(const std::vector<uint8_t>& v, size_t at, size_t n, int src, int dst, int m, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (v[at + i] != byte_of(src, dst, m, i))
      DIT_FAIL(what << ": byte " << i << " of " << n << " from rank " << src << " to " << dst << " is wrong");
}

// Everything the transport does, with sizes that do not fit one slot or one link.
void exercise(ProcessGroup& pg) {
  const int r = pg.rank(), w = pg.size();
  // all_to_all: 3 MB + 12 bytes per rank (several pieces of a slot / w).
  const size_t per = (size_t(3) << 20) + 12;
  std::vector<uint8_t> send(per * size_t(w)), recv(per * size_t(w) + 1, 0xEE);
  for (int d = 0; d < w; ++d) fill(send, size_t(d) * per, per, r, d, 0);
  pg.all_to_all_bytes(send.data(), recv.data(), per);
  for (int s = 0; s < w; ++s) expect(recv, size_t(s) * per, per, s, r, 0, "all_to_all");
  if (recv.back() != 0xEE) DIT_FAIL("all_to_all wrote past the end");

  // all_gather_v: uneven, one rank sends nothing, the others 4 MB and more (two pieces of a slot).
  std::vector<size_t> counts(static_cast<size_t>(w));
  size_t total = 0;
  for (int j = 0; j < w; ++j) total += counts[size_t(j)] = j == 1 ? 0 : (size_t(1) << 20) + size_t(j) * 3;  // floats
  std::vector<float> minef(counts[size_t(r)]);
  for (size_t i = 0; i < minef.size(); ++i) minef[i] = float(r * 1000 + int(i % 977));
  std::vector<float> allf(total + 1, -1.f);
  pg.all_gather_v(minef.data(), allf.data(), counts);
  size_t o = 0;
  for (int s = 0; s < w; ++s)
    for (size_t i = 0; i < counts[size_t(s)]; ++i, ++o)
      dit_test::expect_eq(allf[o], float(s * 1000 + int(i % 977)), "all_gather_v", o, r);
  dit_test::expect_eq(allf[total], -1.f, "all_gather_v (past the end)", total, r);

  // all_to_all_v: blocks of 0 to 1.5 MB, some larger than a piece; all_reduce_sum of 10 MB
  // (built on all-to-all and all-gather over shared memory).
  {
    std::vector<size_t> sc(static_cast<size_t>(w)), rc(static_cast<size_t>(w));
    size_t st = 0, rt = 0;
    auto count = [](int src, int dst) { return size_t((src + 2 * dst) % 3) * ((size_t(1) << 17) + 5); };
    for (int j = 0; j < w; ++j) {
      st += sc[size_t(j)] = count(r, j);
      rt += rc[size_t(j)] = count(j, r);
    }
    std::vector<float> s(st + 1), v(rt + 1, -1.f);
    size_t at = 0;
    for (int d = 0; d < w; ++d)
      for (size_t i = 0; i < sc[size_t(d)]; ++i) s[at++] = dit_test::val(r, d, i);
    pg.all_to_all_v(s.data(), sc, v.data(), rc);
    at = 0;
    for (int src = 0; src < w; ++src)
      for (size_t i = 0; i < rc[size_t(src)]; ++i, ++at) dit_test::expect_eq(v[at], dit_test::val(src, r, i), "all_to_all_v", at, r);
    dit_test::expect_eq(v[rt], -1.f, "all_to_all_v (past the end)", rt, r);
  }
  dit_test::check_all_reduce(pg, (size_t(5) << 19) + 7);
  // The strided reduce-scatter and all-gather of tensor parallelism: two planes (batch items)
  // of 1–2 M floats per rank, so shares span pieces and pieces span planes.
  dit_test::check_reduce_scatter_v(pg, 2, dit_test::uneven_shares(w, (size_t(1) << 19) + 3));
  dit_test::check_all_gather_planes(pg, 2, dit_test::uneven_shares(w, (size_t(1) << 19) + 3));
  dit_test::check_all_to_all_strided(pg, true);  // blocks of 0.3–1.1 M floats: pieces end inside rows

  // Point to point with every peer: three messages each way (2.5 MB, 0 bytes, 100001 bytes),
  // the receives posted in the reverse order of the sends, then every send waited for first.
  const size_t sizes[3] = {(size_t(5) << 20) / 2, 0, 100001};
  std::vector<std::vector<uint8_t>> out(size_t(3 * w)), in(size_t(3 * w));
  std::vector<P2PHandle> recvs, sends;
  for (int p = 0; p < w; ++p) {
    if (p == r) continue;
    for (int m = 2; m >= 0; --m) {
      std::vector<uint8_t>& b = in[size_t(p * 3 + m)];
      b.assign(sizes[m] + 1, 0xEE);
      recvs.push_back(pg.irecv(b.data(), sizes[m], p, uint32_t(100 + m)));
    }
  }
  for (int p = 0; p < w; ++p) {
    if (p == r) continue;
    for (int m = 0; m < 3; ++m) {
      std::vector<uint8_t>& b = out[size_t(p * 3 + m)];
      b.resize(sizes[m] + 1);  // never empty: distinct buffers (a p2p buffer is keyed by address and size)
      fill(b, 0, sizes[m], r, p, m + 1);
      sends.push_back(pg.isend(b.data(), sizes[m], p, uint32_t(100 + m)));
    }
  }
  for (P2PHandle& h : sends) h.wait();  // needs the peers to drain the links meanwhile
  for (P2PHandle& h : recvs) h.wait();
  for (int p = 0; p < w; ++p) {
    if (p == r) continue;
    for (int m = 0; m < 3; ++m) {
      const std::vector<uint8_t>& b = in[size_t(p * 3 + m)];
      expect(b, 0, sizes[m], p, r, m + 1, "p2p");
      if (b.back() != 0xEE) DIT_FAIL("p2p wrote past the end of a receive");
    }
  }
  dit_test::check_ring_p2p(pg, (size_t(3) << 20) / 4 + 3, 2 * w + 1);  // ring attention's pattern, 3 MB blocks
  pg.barrier();
}

void run_threads(int world, bool shared_memory, bool expect_shm) {
  auto hash = std::make_shared<MemoryStore>();
  std::mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        CommOptions o = dit_test::comm_options(60s);
        o.shared_memory = shared_memory;
        auto pg = ProcessGroup::create_world(RendezvousStore::wrap(hash, world, 60s), r, world, o);
        if (pg->uses_shared_memory() != expect_shm)
          DIT_FAIL("uses_shared_memory() is " << pg->uses_shared_memory() << " (" << pg->shared_memory_note() << ")");
        exercise(*pg);
        pg->shutdown();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  for (auto& t : threads) t.join();
  if (!first_error.empty()) FAIL(first_error);
}

}  // namespace

TEST_CASE("shared memory: collectives and messages larger than a slot or a link, as over TCP", "[parallel]") {
  const int world = GENERATE(2, 3, 5);
  INFO("world " << world);
  run_threads(world, true, true);
  run_threads(world, false, false);  // the same checks over TCP (--transport tcp)
}

TEST_CASE("shared memory: ranks on other namespaces or asking for TCP agree on TCP", "[parallel]") {
  // Rank 1 asks for TCP: both ranks must end up on TCP (no hang, no mixed transports).
  auto hash = std::make_shared<MemoryStore>();
  std::string err[2];
  bool shm[2] = {true, true};
  std::thread t[2];
  for (int r = 0; r < 2; ++r)
    t[r] = std::thread([&, r] {
      try {
        CommOptions o = dit_test::comm_options(30s);
        o.shared_memory = r == 0;
        auto pg = ProcessGroup::create_world(RendezvousStore::wrap(hash, 2, 30s), r, 2, o);
        shm[r] = pg->uses_shared_memory();
        if (r == 0) err[0] = pg->shared_memory_note();
        dit_test::check_everything(*pg);
        pg->shutdown();
      } catch (const std::exception& e) {
        err[r] = std::string("error: ") + e.what();
      }
    });
  for (auto& x : t) x.join();
  CHECK_FALSE(shm[0]);
  CHECK_FALSE(shm[1]);
  CHECK(err[0] == "rank 1 of group 'world' asked for TCP only");
  CHECK(err[1].empty());
  // The identity names the machine and the namespaces that make pids and /dev/shm shared.
  const std::string id = shm_host_identity();
  for (const char* part : {"/pid=", "/net=", "/ipc=", "/mnt="}) CHECK_THAT(id, Catch::Contains(part));
}

TEST_CASE("shared memory: a rank killed mid-exchange is named by the others within the timeout", "[parallel]") {
  // The launcher does not help (long grace): the survivors, waiting in shared memory where no
  // connection breaks, must see that rank 1's process is gone.
  const char* op = GENERATE("all_to_all", "p2p", "all_reduce", "window");
  INFO(op);
  const int timeout_ms = 20000;
  std::map<std::string, std::string> vars = {{"DIT_PT_MODE", "launch"},       {"DIT_PT_WORLD", "3"},
                                             {"DIT_PT_SCENARIO", "kill"},     {"DIT_PT_VICTIM", "1"},
                                             {"DIT_PT_OP", op},               {"DIT_PT_GRACE_MS", "60000"},
                                             {"DIT_PT_TIMEOUT_MS", std::to_string(timeout_ms)}};
  dit_test::Result r = dit_test::wait_proc(dit_test::spawn_self(vars), 40s);
  INFO(r.output);
  CHECK(r.code == 128 + SIGKILL);
  CHECK(r.seconds < 10);  // well before the 20 s timeout
  const std::string o = op;
  const std::string want = o == "p2p"          ? ""
                           : o == "all_reduce" ? "all_reduce_sum on group 'world'"
                           : o == "window"     ? "on group 'world'"
                                               : "all_to_all on group 'world'";
  CHECK_THAT(r.output, Catch::Contains("rank 1 is no longer running") || Catch::Contains("rank 1 (pid"));
  if (!want.empty()) CHECK_THAT(r.output, Catch::Contains(want));
  CHECK_THAT(r.output, Catch::Contains("test-launcher: failed: rank 1 was killed by signal 9"));
}

TEST_CASE("shared memory: worker processes use it, and TCP when asked", "[parallel]") {
  for (const char* transport : {"auto", "tcp"}) {
    INFO(transport);
    std::map<std::string, std::string> vars = {{"DIT_PT_MODE", "launch"}, {"DIT_PT_WORLD", "4"},
                                               {"DIT_PT_SCENARIO", "collectives"}, {"DIT_PT_MESH", "1,2,1,2"},
                                               {"DIT_PT_TRANSPORT", transport}};
    if (std::string(transport) == "auto") vars["DIT_PT_EXPECT_SHM"] = "1";
    dit_test::Result r = dit_test::wait_proc(dit_test::spawn_self(vars), 120s);
    INFO(r.output);
    CHECK(r.code == 0);
    CHECK_THAT(r.output, Catch::Contains("ok: rank 0 of 4 passed"));
  }
}

TEST_CASE("shared memory: a /dev/shm too small for the segment leaves the group on TCP, and the run goes on",
          "[parallel]") {
  // /dev/shm of 1 MB in a private mount namespace (root only): rank 0 cannot reserve the
  // segment, says so through the store, and every rank agrees on TCP (an empty value for the
  // segment's name once made the other ranks' store read fail instead).
  if (std::system("/usr/bin/unshare -m true 2>/dev/null") != 0) {
    WARN("skipped: cannot create a mount namespace here (unshare -m needs root)");
    return;
  }
  std::map<std::string, std::string> vars = {{"DIT_PT_MODE", "launch"}, {"DIT_PT_WORLD", "2"},
                                             {"DIT_PT_SCENARIO", "collectives"}, {"DIT_PT_EXPECT_TCP", "1"}};
  const std::vector<std::string> prefix = {"/usr/bin/unshare", "-m", "/bin/sh", "-c",
                                           "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec \"$@\"", "sh"};
  dit_test::Result r = dit_test::wait_proc(dit_test::spawn_self(vars, {}, prefix), 120s);
  INFO(r.output);
  CHECK(r.code == 0);  // every rank passed every collective check, on TCP (the launcher shows rank 0's output)
  CHECK_THAT(r.output, Catch::Contains("ok: rank 0 of 2 passed"));
  CHECK_THAT(r.output, Catch::Contains("rank 0 on TCP: ") && Catch::Contains("No space left on device"));
}

TEST_CASE("shared memory: a message longer or shorter than its receive is an error naming both sizes", "[parallel]") {
  auto hash = std::make_shared<MemoryStore>();
  std::string err[2];
  std::thread t[2];
  for (int r = 0; r < 2; ++r)
    t[r] = std::thread([&, r] {
      try {
        auto pg = ProcessGroup::create_world(RendezvousStore::wrap(hash, 2, 10s), r, 2, dit_test::comm_options(2s));
        if (!pg->uses_shared_memory()) DIT_FAIL("not on shared memory: " << pg->shared_memory_note());
        std::vector<uint8_t> b(200, 1);
        if (r == 0) {
          pg->isend(b.data(), 100, 1, 5).wait();  // fits in the link: complete at once
        } else {
          pg->irecv(b.data(), 200, 0, 5).wait();
        }
      } catch (const std::exception& e) {
        err[r] = e.what();
      }
    });
  for (auto& x : t) x.join();
  INFO(err[0] << " | " << err[1]);
  CHECK(err[0].empty());
  CHECK_THAT(err[1], Catch::Contains("recv on group 'world' (rank 1 of 2) with rank 0") &&
                         Catch::Contains("rank 0 sent 100 bytes with tag 5, this rank receives 200"));
}

TEST_CASE("shared memory: groups with the same members share one segment, their messages kept apart", "[parallel]") {
  const std::string err = dit_test::run_rank_threads(2, 20s, [](std::shared_ptr<ProcessGroup> world, int r) {
    auto twin = world->split("twin", {0, 1});
    auto swapped = world->split("swapped", {1, 0});  // other group ranks: a segment of its own
    if (!world->uses_shared_memory() || !twin->uses_shared_memory() || !swapped->uses_shared_memory())
      DIT_FAIL("not on shared memory: " << world->shared_memory_note());
    if (twin->shared_memory_segment() != world->shared_memory_segment()) DIT_FAIL("twin has a segment of its own");
    if (swapped->shared_memory_segment() == world->shared_memory_segment()) DIT_FAIL("swapped shares the world's");
    // The same tag pending on both groups at once, posted and sent in crossed orders: each
    // message must land in its own group's receive.
    const int peer = 1 - r;
    std::vector<float> from_world(1000, -1.f), from_twin(1000, -1.f), to_world(1000, float(10 + r)),
        to_twin(1000, float(20 + r));
    auto rw = world->irecv(from_world.data(), 4000, peer, 7);
    auto rt = twin->irecv(from_twin.data(), 4000, peer, 7);
    auto st = twin->isend(to_twin.data(), 4000, peer, 7);
    auto sw = world->isend(to_world.data(), 4000, peer, 7);
    st.wait();
    sw.wait();
    rt.wait();
    rw.wait();
    for (size_t i = 0; i < 1000; ++i) {
      dit_test::expect_eq(from_world[i], float(10 + peer), "world message", i, r);
      dit_test::expect_eq(from_twin[i], float(20 + peer), "twin message", i, r);
    }
    // Collectives of both groups, interleaved, over the one segment.
    dit_test::check_all_to_all(*twin, 5000);
    dit_test::check_all_reduce(*world, 300000);
    dit_test::check_all_gather(*twin, 1000);
    dit_test::check_windows(*twin);
    dit_test::check_all_to_all(*swapped, 100);
    twin->shutdown();
    swapped->shutdown();
  });
  INFO(err);
  CHECK(err.empty());
}

TEST_CASE("shared memory: a group split with a window of its own uses it inside a window use of a twin group",
          "[parallel]") {
  // As the replica's shared Q, K, V rows run inside the attention's window use (the groups may
  // have the same members). On one shared window the inner window_begin would wait for the
  // outer use's release: a timeout.
  const std::string err = dit_test::run_rank_threads(2, 20s, [](std::shared_ptr<ProcessGroup> world, int r) {
    auto twin = world->split("twin", {0, 1});
    auto own = world->split("own", {0, 1}, /*own_window=*/true);
    if (!twin->uses_shared_memory() || !own->uses_shared_memory())
      DIT_FAIL("not on shared memory: " << world->shared_memory_note());
    if (own->shared_memory_segment() == twin->shared_memory_segment()) DIT_FAIL("own shares the twin's segment");
    if (!twin->ensure_window(4096) || !own->ensure_window(4096)) DIT_FAIL("no windows: " << own->window_note());
    const int peer = 1 - r;
    for (int k = 0; k < 3; ++k) {
      float* outer = twin->window_begin();
      outer[0] = float(100 * k + r);
      float* inner = own->window_begin();
      inner[0] = float(10 * k + r);
      own->window_publish();
      dit_test::expect_eq(own->window_peer(peer)[0], float(10 * k + peer), "inner window", k, r);
      own->window_release();
      twin->window_publish();
      dit_test::expect_eq(twin->window_peer(peer)[0], float(100 * k + peer), "outer window", k, r);
      twin->window_release();
    }
    twin->shutdown();
    own->shutdown();
  });
  INFO(err);
  CHECK(err.empty());
}
