// Ulysses, Ring and USP attention (ranks as threads) against local attention over the
// whole sequence: every rank feeds its slice of one global Q/K/V and the gathered
// outputs must equal the serial result.
//
// oneDNN from several std::threads: each Attention object owns its primitives' scratchpad
// (scratchpad_mode::user) and its per-thread buffers, and primitive execution is
// thread-safe, so rank threads may run attention concurrently; each rank thread gets its
// own OpenMP team.
#include <catch2/catch.hpp>

#include "tests/compute_types.h"
#include "thread_ranks.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>

#include "parallel/distributed_context.h"
#include "parallel/launcher.h"
#include "parallel/mesh.h"
#include "parallel/parallel_attention.h"
#include "runtime/token_split.h"
#include "runtime/error.h"
#include "runtime/attention_roles.h"
#include "runtime/dtype.h"

using namespace dit;

namespace {

// The rank of `parts` whose split_tokens(n, parts, rank) holds index i.
int split_rank_of(int64_t n, int parts, int64_t i) {
  for (int r = 0; r < parts; ++r)
    if (split_tokens(n, parts, r).begin <= i && i < split_tokens(n, parts, r).end) return r;
  return -1;
}

struct Shape {
  int64_t batch, heads, head_dim, tokens;
  DType compute = DType::F32;
};

// One attention problem: a global random QKV, the serial result, what the ranks produced.
struct Problem {
  Shape s;
  std::vector<float> qkv, ref, got;
  bool repeat_differs = false;  // a second forward on the same object gave other bits
};

Problem make_problem(const Shape& sh, unsigned seed) {
  Problem p{sh, {}, {}, {}};  // the reference is always float32
  const int64_t B = sh.batch, H = sh.heads, d = sh.head_dim, N = sh.tokens;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  p.qkv.resize(size_t(B * N * 3 * H * d));
  for (float& x : p.qkv) x = 2.0f * nd(rng);  // scaled: peaked softmax rows exercise the LSE merge
  p.ref.resize(size_t(B * N * H * d));
  p.got.assign(p.ref.size(), NAN);
  auto local = make_local_self_attention();
  SelfAttentionShape s;
  s.batch = B;
  s.local_tokens = s.total_tokens = N;
  s.heads = H;
  s.head_dim = d;
  local->prepare(s);
  local->forward(p.qkv.data(), p.ref.data());
  return p;
}

std::shared_ptr<ProcessGroup> ref_of(ProcessGroup& g) {  // non-owning: the mesh owns its groups
  return std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup>(), &g);
}

// Runs fn(world group, rank) on `world` threads sharing one in-memory store; returns the
// first failure as "rank r: what" (empty when every rank succeeded).
std::string run_ranks(int world, std::chrono::milliseconds timeout,
                      const std::function<void(std::shared_ptr<ProcessGroup>, int)>& fn) {
  return dit_test::run_rank_threads(world, timeout, fn);
}

// All problems on one mesh (ulysses x ring), the groups built as mesh_layout gives them
// for dp = cfg = 1. Every attention object is prepared first (as the model does before
// the denoising loop), then all run forward in turn, twice: objects sharing the groups
// interleave, and the second pass reuses every buffer and must repeat the first bit for bit.
// The first pass gives forward() the rank's own buffer; the second writes q, k, v where
// qkv_destination() says, when it offers a place (Ulysses in one chunk on shared memory: its
// window, in qkv_dtype(); it must then offer one) — so the two paths must agree bit for bit.
// bf16_input: every rank's q, k, v rounded to bf16 and given as such (forward(const uint16_t*)),
// which the layout must take (qkv_dtype() BF16).
// bf16_output: q, k, v given in bf16 and the output written in bf16 (out_dtype() must say
// BF16); got then holds the bf16 values widened.
// whole_group: the mesh's sp group given too, as dit-gen gives it, so that with a ring and at
// least as many heads as ranks the attention runs as Ulysses over the whole group through its
// windows; false: the layout as asked (the ring's own windows).
void run_layout(int ulysses, int ring, std::vector<Problem>& problems, int chunks = kDefaultUlyssesChunks,
                bool bf16_input = false, bool bf16_output = false, bool whole_group = true) {
  bf16_input = bf16_input || bf16_output;
  const int world = ulysses * ring;
  const MeshDegrees deg{1, 1, ring, ulysses};
  const char* want_name = ulysses > 1 && ring > 1 ? "usp" : ulysses > 1 ? "ulysses" : "ring";
  std::mutex mu;
  std::string err = run_ranks(world, std::chrono::milliseconds(30000), [&](std::shared_ptr<ProcessGroup> pg, int) {
    DeviceMesh mesh(pg, deg);
    // (Catch assertions are not thread-safe: rank threads throw instead.)
    const int sp_rank = mesh.rank_in(Group::Sp);
    DIT_CHECK(mesh.ulysses().size() == ulysses && mesh.ring().size() == ring &&
                  sp_rank == mesh.ring().rank() * ulysses + mesh.ulysses().rank(),
              "unexpected mesh groups");
    struct Mine {
      std::unique_ptr<SelfAttention> attn;
      TokenRange range;
      std::vector<float> in, out, first;
      bool window = false;  // Ulysses through windows: qkv_destination() must offer one
    };
    std::vector<Mine> mine(problems.size());
    const bool shm = !std::getenv("DIT_NO_SHM_WINDOWS");  // else threads share one machine
    bool ring_windows = false, whole_windows = false;     // set up by a problem so far
    for (size_t i = 0; i < problems.size(); ++i) {
      const Shape& sh = problems[i].s;
      const int64_t B = sh.batch, H = sh.heads, d = sh.head_dim, N = sh.tokens;
      Mine& m = mine[i];
      m.attn = make_sequence_parallel_attention(ref_of(mesh.ulysses()), ref_of(mesh.ring()), chunks,
                                                whole_group ? ref_of(mesh.sp()) : nullptr);
      DIT_CHECK(std::strcmp(m.attn->name(), want_name) == 0, "name() is " << m.attn->name() << ", not " << want_name);
      m.range = split_tokens(N, world, sp_rank);
      const int64_t T = m.range.size();
      SelfAttentionShape s;
      s.batch = B;
      s.local_tokens = T;
      s.total_tokens = N;
      s.heads = H;
      s.head_dim = d;
      s.compute = sh.compute;
      m.attn->prepare(s);
      // With a ring: the whole group's windows where it has the heads, else the ring's.
      const bool whole = whole_group && ring > 1 && H >= world && shm;
      whole_windows = whole_windows || whole;
      ring_windows = ring_windows || (ring > 1 && !whole && shm);
      // (Groups with the same members share one segment, windows included: the ring's and the
      // sp group's when there is no Ulysses.) The whole group's use shows in qkv_destination().
      DIT_CHECK((mesh.ring().window_bytes() > 0) == (ring_windows || (ulysses == 1 && whole_windows)),
                "ring window: " << mesh.ring().window_bytes() << " bytes (" << mesh.ring().window_note() << ")");
      // Ulysses in one chunk (chunks 1, USP, or ranks with one head each) reads through windows,
      // and so does the whole group.
      const bool one_chunk = ring > 1 || chunks == 1 || split_tokens(H, ulysses, 0).size() == 1;
      m.window = shm && (whole || (ulysses > 1 && ring == 1 && one_chunk));
      m.in.resize(size_t(B * T * 3 * H * d) + 1);
      m.out.assign(size_t(B * T * H * d) + 1, NAN);
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(problems[i].qkv.data() + (b * N + m.range.begin) * 3 * H * d, T * 3 * H * d,
                    m.in.data() + b * T * 3 * H * d);
    }
    std::vector<std::vector<uint16_t>> in16(problems.size());
    if (bf16_input)
      for (size_t i = 0; i < problems.size(); ++i) {
        DIT_CHECK(mine[i].attn->qkv_dtype() == DType::BF16, "qkv_dtype() is " << dtype_name(mine[i].attn->qkv_dtype()));
        for (float x : mine[i].in) in16[i].push_back(f32_to_bf16(x));
      }
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < problems.size(); ++i) {
        Mine& m = mine[i];
        void* at = pass == 1 ? m.attn->qkv_destination() : nullptr;
        DIT_CHECK(pass == 0 || (at != nullptr) == m.window, "qkv_destination() " << (at ? "offered" : "did not offer")
                                                                                   << " a place ("
                                                                                   << mesh.ulysses().window_note() << "; "
                                                                                   << mesh.sp().window_note() << ")");
        const bool give16 = bf16_input || (at && m.attn->qkv_dtype() == DType::BF16);
        const uint16_t* q16 = in16[i].data();
        const float* q32 = m.in.data();
        if (at && give16) {
          uint16_t* y = static_cast<uint16_t*>(at);
          for (size_t k = 0; k + 1 < m.in.size(); ++k) y[k] = bf16_input ? in16[i][k] : f32_to_bf16(m.in[k]);
          q16 = y;
        } else if (at) {
          std::copy_n(m.in.data(), m.in.size() - 1, static_cast<float*>(at));
          q32 = static_cast<float*>(at);
        }
        if (bf16_output) {
          DIT_CHECK(m.attn->out_dtype() == DType::BF16, "out_dtype() is " << dtype_name(m.attn->out_dtype()));
          std::vector<uint16_t> o16(m.out.size(), 0x7fc1);  // NaN where nothing is written
          m.attn->forward(q16, o16.data());
          for (size_t k = 0; k < o16.size(); ++k) m.out[k] = bf16_to_f32(o16[k]);
        } else if (give16)
          m.attn->forward(q16, m.out.data());
        else
          m.attn->forward(q32, m.out.data());
        if (pass == 0) {
          m.first = m.out;
          continue;
        }
        const Shape& sh = problems[i].s;
        const int64_t B = sh.batch, HD = sh.heads * sh.head_dim, N = sh.tokens, T = m.range.size();
        std::lock_guard<std::mutex> lock(mu);
        if (std::memcmp(m.first.data(), m.out.data(), size_t(B * T * HD) * 4) != 0) problems[i].repeat_differs = true;
        for (int64_t b = 0; b < B; ++b)
          std::copy_n(m.out.data() + b * T * HD, T * HD, problems[i].got.data() + (b * N + m.range.begin) * HD);
      }
  });
  if (!err.empty()) FAIL("u" << ulysses << " r" << ring << " chunks " << chunks << ": " << err);
  for (const Problem& p : problems) {
    double maxd = 0, maxr = 0;
    for (size_t i = 0; i < p.ref.size(); ++i) {
      maxd = std::max(maxd, double(std::fabs(p.got[i] - p.ref[i])));
      maxr = std::max(maxr, double(std::fabs(p.ref[i])));
    }
    INFO("u" << ulysses << " r" << ring << " chunks " << chunks << " " << dtype_name(p.s.compute) << " batch " << p.s.batch << " heads " << p.s.heads << " head_dim "
              << p.s.head_dim << " tokens " << p.s.tokens << ": max diff " << maxd << " (max " << maxr << ")");
    CHECK(std::isfinite(maxd));  // NaN (a token nobody wrote) fails here
    // bf16: the products round to bf16 (runtime attention tests allow 2e-2 against float64).
    CHECK(maxd <= (p.s.compute == DType::BF16 ? 2e-2 : 1e-5) * maxr);
    CHECK_FALSE(p.repeat_differs);
  }
}

// batch 1 and 2 x head_dim 8 and 16 x tokens 64, 37 (uneven) and 3 (fewer than 4 ranks:
// empty ranges), for each head count.
std::vector<Problem> problems_for(std::initializer_list<int64_t> heads) {
  std::vector<Problem> ps;
  unsigned seed = 1;
  for (int64_t h : heads)
    for (int64_t b : {1, 2})
      for (int64_t d : {8, 16})
        for (int64_t n : {64, 37, 3}) ps.push_back(make_problem({b, h, d, n}, seed++));
  return ps;
}

// The window tests' cases and problems: batch 2, head_dim 16, heads 4 and 6 (uneven over 4
// ranks) x tokens 64, 37 and 3 (empty ranges over 4 ranks).
struct WindowCase {
  int ulysses, ring;
  DType compute;
  bool bf16_output;
};

std::vector<Problem> window_problems(DType compute, unsigned seed) {
  std::vector<Problem> ps;
  for (int64_t h : {4, 6})
    for (int64_t n : {64, 37, 3}) ps.push_back(make_problem({2, h, 16, n, compute}, seed++));
  return ps;
}

}  // namespace

TEST_CASE("sequence split: contiguous, sizes differ by at most one, covers everything", "[parallel][attention]") {
  for (int64_t n : {0, 1, 3, 16, 37, 64})
    for (int p : {1, 2, 3, 4, 5, 8}) {
      auto all = split_all(n, p);
      REQUIRE(all.size() == size_t(p));
      int64_t next = 0, lo = n, hi = 0;
      for (int i = 0; i < p; ++i) {
        const TokenRange& r = all[size_t(i)];
        CHECK(r.begin == next);
        CHECK(r.size() >= 0);
        CHECK(r.size() == n / p + (i < n % p ? 1 : 0));  // the first n % p ranges get the extra token
        next = r.end;
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
    }
  CHECK_THROWS_AS(split_tokens(10, 0, 0), Error);
  CHECK_THROWS_AS(split_tokens(10, 2, 2), Error);
}

TEST_CASE("Ulysses, Ring and USP attention equal serial attention", "[parallel][attention]") {
  struct Layout {
    int ulysses, ring;
    std::initializer_list<int64_t> heads;
  };
  // Heads that the Ulysses degree does not divide split unevenly (u4 over 6 heads: 2, 2, 1, 1;
  // u3 over 4: 2, 1, 1; u2 over 3: 2, 1), and a degree equal to the head count (u4, 4 heads).
  const Layout layouts[] = {{2, 1, {4, 3}}, {3, 1, {4}}, {4, 1, {4, 6}}, {1, 2, {4}},
                            {1, 3, {4, 6}}, {1, 4, {4}}, {2, 2, {4, 3}}};
  for (const Layout& l : layouts) {
    auto problems = problems_for(l.heads);
    run_layout(l.ulysses, l.ring, problems);
  }
}

TEST_CASE("Ring: K/V read in place from shared-memory windows give the bits of K/V sent as messages",
          "[parallel][attention]") {
  // The ring's own windows: without the sp group (with it, they serve where the whole group
  // has fewer heads than ranks: 3 heads over 4).
  for (auto [u, r] : {std::pair<int, int>{1, 2}, {1, 3}, {2, 2}}) {
    std::vector<Problem> windows = problems_for({4, 3}), messages = problems_for({4, 3});
    run_layout(u, r, windows, kDefaultUlyssesChunks, false, false, false);
    setenv("DIT_NO_SHM_WINDOWS", "1", 1);  // before the rank threads start
    run_layout(u, r, messages, kDefaultUlyssesChunks, false, false, false);
    unsetenv("DIT_NO_SHM_WINDOWS");
    for (size_t i = 0; i < windows.size(); ++i) {
      INFO("u" << u << " r" << r << " problem " << i);
      CHECK(std::memcmp(windows[i].got.data(), messages[i].got.data(), windows[i].got.size() * 4) == 0);
    }
  }
}

TEST_CASE("Ulysses through shared-memory windows gives the all-to-all's result, in bf16 its bits",
          "[parallel][attention]") {
  // q, k, v and the outputs read from the ranks' windows (the first pass of run_layout copying
  // them in, the second written where qkv_destination() says), the attention's tasks shared,
  // against the all-to-all (DIT_NO_SHM_WINDOWS): f32 and bf16 (outputs returned in bf16), uneven
  // heads and tokens (u3 over 4 heads, u4 over 6, 37 tokens; 3 tokens over 4 ranks: empty
  // ranges), USP without the sp group (which keeps to the all-to-all; with it, USP runs as
  // Ulysses over the whole group: the test below). bf16: the same bits, the kernels reading the
  // same planes. f32: the windows' attention reads dense planes where the all-to-all's reads
  // strided rows in place, so its sums may round differently (within 1e-5 of the largest
  // output, as every layout against serial).
  std::vector<WindowCase> cases = {{2, 1, DType::F32, false}, {3, 1, DType::F32, false}, {4, 1, DType::F32, false},
                                   {2, 2, DType::F32, false}};
  if (dit_test::bf16_available())
    for (WindowCase c : {WindowCase{2, 1, DType::BF16, false}, {3, 1, DType::BF16, true}, {4, 1, DType::BF16, true},
                         {2, 2, DType::BF16, false}})
      cases.push_back(c);
  for (const WindowCase& c : cases) {
    std::vector<Problem> windows = window_problems(c.compute, 200), messages = window_problems(c.compute, 200);
    run_layout(c.ulysses, c.ring, windows, 1, c.bf16_output, c.bf16_output, c.ring == 1);
    setenv("DIT_NO_SHM_WINDOWS", "1", 1);  // before the rank threads start
    run_layout(c.ulysses, c.ring, messages, 1, c.bf16_output, c.bf16_output, c.ring == 1);
    unsetenv("DIT_NO_SHM_WINDOWS");
    for (size_t i = 0; i < windows.size(); ++i) {
      INFO("u" << c.ulysses << " r" << c.ring << " " << dtype_name(c.compute) << (c.bf16_output ? " bf16 output" : "")
               << " problem " << i);
      if (c.compute == DType::BF16) {
        CHECK(std::memcmp(windows[i].got.data(), messages[i].got.data(), windows[i].got.size() * 4) == 0);
        continue;
      }
      double maxd = 0, maxr = 0;
      for (size_t k = 0; k < windows[i].got.size(); ++k) {
        maxd = std::max(maxd, double(std::fabs(windows[i].got[k] - messages[i].got[k])));
        maxr = std::max(maxr, double(std::fabs(messages[i].got[k])));
      }
      INFO("max diff " << maxd << " (max " << maxr << ")");
      CHECK(std::isfinite(maxd));
      CHECK(maxd <= 1e-5 * maxr);
    }
  }
}

TEST_CASE("Ring and USP on one machine attend as Ulysses over the whole group: Ulysses' bits", "[parallel][attention]") {
  // Given the sp group (as dit-gen gives it), a layout with a ring whose group is on one
  // machine and has at least as many heads as ranks runs as Ulysses over all of its ranks,
  // through the group's windows: r2 gives u2's bits, r4 and u2r2 give u4's, in f32 and bf16
  // (and with bf16 outputs), with uneven heads (6 over 4 ranks) and tokens (37; 3 over 4
  // ranks: empty ranges). run_layout checks the sp group's windows were used and the ring's
  // were not, and each against the serial attention.
  std::vector<WindowCase> cases = {{1, 2, DType::F32, false}, {1, 4, DType::F32, false}, {2, 2, DType::F32, false}};
  if (dit_test::bf16_available())
    for (WindowCase c : {WindowCase{1, 2, DType::BF16, false}, {1, 4, DType::BF16, true}, {2, 2, DType::BF16, true}})
      cases.push_back(c);
  for (const WindowCase& c : cases) {
    std::vector<Problem> layout = window_problems(c.compute, 300), ulysses = window_problems(c.compute, 300);
    run_layout(c.ulysses, c.ring, layout, 1, c.bf16_output, c.bf16_output);
    run_layout(c.ulysses * c.ring, 1, ulysses, 1, c.bf16_output, c.bf16_output);
    for (size_t i = 0; i < layout.size(); ++i) {
      INFO("u" << c.ulysses << " r" << c.ring << " " << dtype_name(c.compute) << (c.bf16_output ? " bf16 output" : "")
               << " problem " << i);
      CHECK(std::memcmp(layout[i].got.data(), ulysses[i].got.data(), layout[i].got.size() * 4) == 0);
    }
  }
}

TEST_CASE("Ulysses pipelined over head chunks equals serial attention, whatever the chunk count", "[parallel][attention]") {
  // 1 (no pipelining), 2 and 3 (chunks of uneven size: 8 heads over u2 -> 4 per rank -> 2,1,1),
  // more chunks than a rank has heads (6 heads over u4: ranks with 1 head have empty chunks).
  struct Case {
    int ulysses, chunks;
    std::initializer_list<int64_t> heads;
  };
  const Case cases[] = {{2, 1, {4}}, {2, 2, {8, 3}}, {2, 3, {8}}, {4, 8, {6}}, {3, 2, {7}}};
  for (const Case& c : cases) {
    auto problems = problems_for(c.heads);
    run_layout(c.ulysses, 1, problems, c.chunks);
  }
}

TEST_CASE("Ulysses, Ring and USP attention with bf16 compute", "[parallel][attention]") {
  if (!dit_test::bf16_available()) return;
  for (auto [u, r] : {std::pair<int, int>{2, 1}, {1, 3}, {2, 2}}) {
    std::vector<Problem> problems;
    unsigned seed = 100;
    for (int64_t n : {64, 37}) problems.push_back(make_problem({2, 4, 16, n, DType::BF16}, seed++));
    run_layout(u, r, problems);
  }
}

TEST_CASE("Ulysses in bf16: q, k, v sent in the kernels' form, outputs returned in bf16: the bits of local bf16 attention",
          "[parallel][attention]") {
  if (!dit_test::bf16_available()) return;
  // Without and with chunks, each rank's heads are converted to bf16 before the exchange and
  // read as they arrive; local attention converts the same values itself. Per head the work
  // is the same, so the bits must be: exactly for the heads a rank computed for its own
  // tokens, and rounded to bf16 (to nearest even) for the heads that came back from another
  // rank, which return in bf16. Heads split unevenly (u3 over 4 heads; u2 over 3), tokens too
  // (37 over 2 or 3 ranks, 3 over 4); an odd head_dim (7) cannot travel as bf16 pairs and
  // takes the f32 exchange, with every bit of local attention.
  struct Case {
    int ulysses;
    int64_t heads, head_dim, tokens;
  };
  for (const Case& c : {Case{2, 4, 16, 64}, Case{2, 3, 16, 37}, Case{3, 4, 8, 37}, Case{4, 4, 8, 3}, Case{2, 2, 7, 20}})
    for (int chunks : {1, 2}) {
      std::vector<Problem> ps;
      for (int64_t b : {1, 2}) ps.push_back(make_problem({b, c.heads, c.head_dim, c.tokens, DType::BF16}, unsigned(50 + b)));
      run_layout(c.ulysses, 1, ps, chunks);
      for (const Problem& p : ps) {
        auto local = make_local_self_attention();
        SelfAttentionShape s;
        s.batch = p.s.batch;
        s.local_tokens = s.total_tokens = p.s.tokens;
        s.heads = p.s.heads;
        s.head_dim = p.s.head_dim;
        s.compute = DType::BF16;
        local->prepare(s);
        std::vector<float> want(p.got.size());
        local->forward(p.qkv.data(), want.data());
        // Token t's output of head h came from the Ulysses rank holding h; it is rounded when
        // that rank is not the one holding t.
        const bool pairs = c.head_dim % 2 == 0;
        size_t rounded = 0;
        for (int64_t b = 0; b < p.s.batch; ++b)
          for (int64_t t = 0; t < c.tokens; ++t)
            for (int64_t h = 0; h < c.heads; ++h) {
              const bool other = split_rank_of(c.tokens, c.ulysses, t) != split_rank_of(c.heads, c.ulysses, h);
              float* w = want.data() + ((b * c.tokens + t) * c.heads + h) * c.head_dim;
              for (int64_t i = 0; pairs && other && i < c.head_dim; ++i, ++rounded) w[i] = bf16_to_f32(f32_to_bf16(w[i]));
            }
        INFO("u" << c.ulysses << " chunks " << chunks << " heads " << c.heads << " head_dim " << c.head_dim << " tokens "
                 << c.tokens << " batch " << p.s.batch << ", " << rounded << " values rounded");
        CHECK((rounded > 0) == pairs);
        CHECK(std::memcmp(p.got.data(), want.data(), want.size() * 4) == 0);
      }
      // bf16 output (bf16 pairs; one chunk or two): every value is local attention's rounded,
      // this rank's own heads included.
      if (c.head_dim % 2 != 0) continue;
      // (USP below)
      std::vector<Problem> ps16;
      for (int64_t b : {1, 2}) ps16.push_back(make_problem({b, c.heads, c.head_dim, c.tokens, DType::BF16}, unsigned(50 + b)));
      run_layout(c.ulysses, 1, ps16, chunks, true, true);
      for (size_t i = 0; i < ps16.size(); ++i) {
        size_t off = 0;
        for (size_t k = 0; k < ps16[i].got.size(); ++k) off += ps16[i].got[k] != bf16_to_f32(f32_to_bf16(ps[i].got[k]));
        INFO("u" << c.ulysses << " chunks " << chunks << " bf16 output, heads " << c.heads << " tokens " << c.tokens
                 << " problem " << i);
        CHECK(off == 0);
      }
    }
}

TEST_CASE("bf16 q, k, v given as bf16 (a QKV projection writing bf16) give the bits of f32 ones",
          "[parallel][attention]") {
  // The kernels round q, k, v to bf16 before they use them, so q, k, v rounded by the projection
  // must change no bit: local attention, the ring (windows and messages), Ulysses exchanging
  // bf16 with and without chunks, USP (the ring over Ulysses' bf16 planes). Ulysses and USP
  // with an odd head_dim exchange f32: they take f32 q, k, v (qkv_dtype() F32) and refuse
  // bf16 ones.
  if (!dit_test::bf16_available()) return;
  struct Case {
    int ulysses, ring, chunks;
    int64_t head_dim;
  };
  for (const Case& c : {Case{1, 1, 1, 16}, Case{1, 3, 1, 16}, Case{2, 1, 1, 16}, Case{2, 1, 2, 16}, Case{3, 1, 2, 8},
                        Case{2, 2, 1, 16}})
    for (bool messages : {false, true}) {
      if (messages && c.ring == 1) continue;
      std::vector<Problem> f32_in, bf16_in;
      for (int64_t n : {64, 37})
        for (std::vector<Problem>* ps : {&f32_in, &bf16_in})
          ps->push_back(make_problem({2, 4, c.head_dim, n, DType::BF16}, unsigned(70 + n)));
      if (messages) setenv("DIT_NO_SHM_WINDOWS", "1", 1);
      if (c.ulysses * c.ring == 1) {  // local attention
        for (size_t i = 0; i < f32_in.size(); ++i) {
          auto local = make_local_self_attention();
          SelfAttentionShape s;
          s.batch = 2;
          s.local_tokens = s.total_tokens = f32_in[i].s.tokens;
          s.heads = 4;
          s.head_dim = c.head_dim;
          s.compute = DType::BF16;
          local->prepare(s);
          REQUIRE(local->qkv_dtype() == DType::BF16);
          std::vector<uint16_t> q16;
          for (float x : f32_in[i].qkv) q16.push_back(f32_to_bf16(x));
          local->forward(f32_in[i].qkv.data(), f32_in[i].got.data());
          local->forward(q16.data(), bf16_in[i].got.data());
        }
      } else {
        run_layout(c.ulysses, c.ring, f32_in, c.chunks);
        run_layout(c.ulysses, c.ring, bf16_in, c.chunks, true);
      }
      unsetenv("DIT_NO_SHM_WINDOWS");
      for (size_t i = 0; i < f32_in.size(); ++i) {
        INFO("u" << c.ulysses << " r" << c.ring << " chunks " << c.chunks << (messages ? " messages" : "") << " problem "
                 << i);
        CHECK(std::memcmp(bf16_in[i].got.data(), f32_in[i].got.data(), f32_in[i].got.size() * 4) == 0);
      }
    }
  // f32 exchanges: f32 q, k, v only.
  for (const auto& layout : {std::tuple<int, int, int64_t>{2, 2, 7}, {2, 1, 7}}) {
    // Plain copies: clang (C++17) does not let the lambda below capture structured bindings.
    const int u = std::get<0>(layout), r = std::get<1>(layout);
    const int64_t d = std::get<2>(layout);
    const auto timeout = std::chrono::milliseconds(30000);
    const std::string e = run_ranks(u * r, timeout, [&](std::shared_ptr<ProcessGroup> pg, int) {
      DeviceMesh mesh(pg, MeshDegrees{1, 1, r, u});
      auto attn = make_sequence_parallel_attention(ref_of(mesh.ulysses()), ref_of(mesh.ring()), 1);
      SelfAttentionShape s;
      s.batch = 1;
      s.local_tokens = split_tokens(16, u * r, mesh.rank_in(Group::Sp)).size();
      s.total_tokens = 16;
      s.heads = 4;
      s.head_dim = d;
      s.compute = DType::BF16;
      attn->prepare(s);
      DIT_CHECK(attn->qkv_dtype() == DType::F32, "u" << u << " r" << r << " d " << d << ": qkv_dtype() is bf16");
      DIT_CHECK(attn->out_dtype() == DType::F32, "u" << u << " r" << r << " d " << d << ": out_dtype() is bf16");
      std::vector<uint16_t> in(size_t(s.local_tokens * 3 * 4 * d) + 1);
      std::vector<float> out(size_t(s.local_tokens * 4 * d) + 1);
      attn->forward(in.data(), out.data());  // throws: caught by run_rank_threads
    });
    INFO("u" << u << " r" << r << " d " << d);
    CHECK(e.find("but it takes f32") != std::string::npos);
  }
  // A bf16 output where the exchange is f32 (odd head_dim) is refused.
  const std::string e = run_ranks(2, std::chrono::milliseconds(30000), [&](std::shared_ptr<ProcessGroup> pg, int) {
    DeviceMesh mesh(pg, MeshDegrees{1, 1, 1, 2});
    auto attn = make_sequence_parallel_attention(ref_of(mesh.ulysses()), ref_of(mesh.ring()), 2);
    attn->prepare(SelfAttentionShape{1, 8, 16, 4, 7, DType::BF16});  // batch, tokens here, all, heads, d
    std::vector<uint16_t> in(8 * 3 * 4 * 7), out(8 * 4 * 7);
    attn->forward(in.data(), out.data());  // throws: caught by run_rank_threads
  });
  CHECK(e.find("forward into bf16 output, but it writes f32") != std::string::npos);
}

TEST_CASE("Ulysses: a degree above the head count is a clear error", "[parallel][attention]") {
  auto hash = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto timeout = std::chrono::milliseconds(20000);
      auto pg = ProcessGroup::create_world(RendezvousStore::wrap(hash, 3, timeout), r, 3, dit_test::comm_options(timeout));
      auto attn = make_sequence_parallel_attention(pg, nullptr);
      SelfAttentionShape s;
      s.batch = 1;
      s.local_tokens = split_tokens(12, 3, r).size();
      s.total_tokens = 12;
      s.heads = 2;
      s.head_dim = 8;
      try {
        attn->prepare(s);
      } catch (const Error& e) {
        errors[size_t(r)] = e.what();
      }
      pg->shutdown();
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) {
    CHECK(e.find("2 attention heads cannot be split over 3 ranks") != std::string::npos);
  }
}

TEST_CASE("sequence-parallel attention: a wrong local token count is refused at prepare", "[parallel][attention]") {
  // No communication at prepare: one process, groups of one, stands for the check.
  auto hash = std::make_shared<MemoryStore>();
  auto pg = ProcessGroup::create_world(RendezvousStore::wrap(hash, 1, std::chrono::seconds(5)), 0, 1);
  auto attn = make_sequence_parallel_attention(pg, pg);
  SelfAttentionShape s;
  s.local_tokens = 5;
  s.total_tokens = 6;
  s.heads = 2;
  s.head_dim = 8;
  REQUIRE_THROWS_WITH(attn->prepare(s), Catch::Contains("holds 5 tokens, expected 6"));
}

TEST_CASE("sequence-parallel attention: a failed peer becomes dit::Error, no hang", "[parallel][attention]") {
  // USP u2 x r2: rank 3 gives up after prepare; its Ulysses partner (rank 2) fails in the
  // all-to-all, ranks 0 and 1 in the ring exchange. Failures travel through the store, not
  // the timeout: a generous one only keeps a loaded (sanitizer) machine from timing out first.
  const int world = 4;
  std::vector<std::string> errors(world);
  std::string err = run_ranks(world, std::chrono::milliseconds(10000), [&](std::shared_ptr<ProcessGroup> pg, int r) {
    DeviceMesh mesh(pg, {1, 1, 2, 2});
    auto attn = make_sequence_parallel_attention(ref_of(mesh.ulysses()), ref_of(mesh.ring()));
    SelfAttentionShape s;
    s.batch = 1;
    s.total_tokens = 16;
    s.local_tokens = split_tokens(16, world, mesh.rank_in(Group::Sp)).size();
    s.heads = 2;
    s.head_dim = 8;
    attn->prepare(s);
    // prepare is collective (the ring's window): rank 3 gives up only once every rank has
    // prepared, else a slow rank's prepare, not its forward, meets the failure.
    pg->barrier();
    if (r == 3) {
      pg->abort("rank 3 gave up");
      return;
    }
    std::vector<float> in(size_t(s.local_tokens * 3 * 16), 0.5f), out(size_t(s.local_tokens * 16));
    try {
      attn->forward(in.data(), out.data());
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
      pg->abort(e.what());
    }
  });
  INFO(err);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << errors[size_t(r)]);
    CHECK(errors[size_t(r)].find("rank 3 failed: rank 3 gave up") != std::string::npos);
  }
  CHECK(errors[2].find("on group 'ulysses'") != std::string::npos);
}

TEST_CASE("Ulysses chunks: as asked, else pipelined across machines and not on one", "[parallel][attention]") {
  LaunchEnv one;  // 4 ranks, all on this machine
  one.world = 4;
  one.local_world = 4;
  one.local_known = true;
  LaunchEnv two = one;  // 2 machines of 2
  two.local_world = 2;
  LaunchEnv unknown = two;  // local ranks not given by the launcher: assume one machine
  unknown.local_known = false;
  CHECK(ulysses_chunks_for(one, 0) == 1);
  CHECK(ulysses_chunks_for(two, 0) == kDefaultUlyssesChunks);
  CHECK(ulysses_chunks_for(unknown, 0) == 1);
  CHECK(ulysses_chunks_for(one, 3) == 3);
  CHECK(ulysses_chunks_for(two, 1) == 1);
}

TEST_CASE("USP in bf16: q, k, v exchanged in bf16, the ring over them, outputs returned in bf16",
          "[parallel][attention]") {
  // Ulysses inside a ring group exchanges the kernels' bf16 form and the ring reads q and its
  // K/V block from there: f32 and bf16 q, k, v give the same bits (above), and a bf16 output is
  // the f32 output rounded, every value. u2r2 and u2r3 (tokens uneven, one group short).
  if (!dit_test::bf16_available()) return;
  for (int ring : {2, 3})
    for (bool messages : {false, true}) {
      std::vector<Problem> f32_out, bf16_out;
      for (int64_t n : {64, 37})
        for (std::vector<Problem>* ps : {&f32_out, &bf16_out})
          ps->push_back(make_problem({2, 4, 16, n, DType::BF16}, unsigned(90 + n)));
      if (messages) setenv("DIT_NO_SHM_WINDOWS", "1", 1);
      run_layout(2, ring, f32_out, 1, true);
      run_layout(2, ring, bf16_out, 1, true, true);
      unsetenv("DIT_NO_SHM_WINDOWS");
      for (size_t i = 0; i < f32_out.size(); ++i) {
        size_t off = 0;
        for (size_t k = 0; k < f32_out[i].got.size(); ++k)
          off += bf16_out[i].got[k] != bf16_to_f32(f32_to_bf16(f32_out[i].got[k]));
        INFO("u2r" << ring << (messages ? " messages" : " windows") << " problem " << i);
        CHECK(off == 0);
      }
    }
}
