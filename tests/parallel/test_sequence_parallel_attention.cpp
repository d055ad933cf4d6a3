// Ulysses, Ring and USP attention (ranks as threads) against local attention over the
// whole sequence: every rank feeds its slice of one global Q/K/V and the gathered
// outputs must equal the serial result.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "parallel/mesh.h"
#include "parallel/parallel_attention.h"
#include "parallel/sequence_split.h"
#include "runtime/error.h"
#include "runtime/self_attention.h"

using namespace dit;

namespace {

struct Case {
  int ulysses, ring;
  int64_t batch, heads, head_dim, tokens;
};

void run_case(const Case& c) {
  const int world = c.ulysses * c.ring;
  const int64_t B = c.batch, H = c.heads, d = c.head_dim, N = c.tokens;
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd;
  std::vector<float> qkv(size_t(B * N * 3 * H * d));
  for (float& x : qkv) x = nd(rng);

  // Serial reference.
  std::vector<float> ref(size_t(B * N * H * d));
  {
    auto local = make_local_self_attention();
    SelfAttentionShape s;
    s.batch = B;
    s.local_tokens = s.total_tokens = N;
    s.heads = H;
    s.head_dim = d;
    local->prepare(s);
    local->forward(qkv.data(), ref.data());
  }

  std::vector<float> got(ref.size(), NAN);
  auto hash = std::make_shared<MemoryStore>();
  std::mutex mu;
  std::string first_error;
  std::vector<std::thread> threads;
  const MeshDegrees deg{1, 1, c.ring, c.ulysses};
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto timeout = std::chrono::milliseconds(30000);
        auto store = RendezvousStore::wrap(hash, world, timeout);
        auto pg = ProcessGroup::create_world(store, r, world, {timeout});
        {
          DeviceMesh mesh(pg, deg);
          auto ref_of = [](ProcessGroup& g) { return std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup>(), &g); };
          auto attn = make_sequence_parallel_attention(ref_of(mesh.ulysses()), ref_of(mesh.ring()));
          const SeqRange mine = split_tokens(N, world, mesh.coord().sp_rank);
          const int64_t T = mine.size();
          SelfAttentionShape s;
          s.batch = B;
          s.local_tokens = T;
          s.total_tokens = N;
          s.heads = H;
          s.head_dim = d;
          attn->prepare(s);
          std::vector<float> in(size_t(B * T * 3 * H * d) + 1), out(size_t(B * T * H * d) + 1);
          for (int64_t b = 0; b < B; ++b)
            std::copy_n(qkv.data() + (b * N + mine.begin) * 3 * H * d, T * 3 * H * d, in.data() + b * T * 3 * H * d);
          for (int rep = 0; rep < 2; ++rep) {  // buffers reused: the second call must give the same result
            attn->forward(in.data(), out.data());
            std::lock_guard<std::mutex> lock(mu);
            for (int64_t b = 0; b < B; ++b)
              std::copy_n(out.data() + b * T * H * d, T * H * d, got.data() + (b * N + mine.begin) * H * d);
          }
        }
        pg->shutdown();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.empty()) FAIL(first_error);
  double maxd = 0, maxr = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    maxd = std::max(maxd, double(std::fabs(got[i] - ref[i])));
    maxr = std::max(maxr, double(std::fabs(ref[i])));
  }
  INFO("u" << c.ulysses << " r" << c.ring << " batch " << B << " heads " << H << " d " << d << " tokens " << N
           << ": max diff " << maxd << " (max " << maxr << ")");
  CHECK(std::isfinite(maxd));
  CHECK(maxd <= 1e-5 * maxr);
}

}  // namespace

TEST_CASE("sequence split: contiguous, sizes differ by at most one, covers everything", "[parallel][attention]") {
  for (int64_t n : {0, 1, 3, 16, 37, 64})
    for (int p : {1, 2, 3, 4, 5, 8}) {
      auto all = split_all(n, p);
      int64_t next = 0, lo = n, hi = 0;
      for (const SeqRange& r : all) {
        CHECK(r.begin == next);
        next = r.end;
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
    }
}

TEST_CASE("Ulysses, Ring and USP attention equal serial attention", "[parallel][attention]") {
  const std::vector<Case> cases = {
      {2, 1, 1, 4, 8, 64},  {2, 1, 2, 4, 16, 37}, {4, 1, 2, 4, 8, 37},  {4, 1, 1, 4, 8, 3},   // Ulysses
      {1, 2, 1, 4, 8, 64},  {1, 2, 2, 4, 16, 37}, {1, 3, 2, 6, 8, 37},  {1, 4, 2, 4, 8, 37},  // Ring
      {1, 4, 1, 4, 8, 3},                                                                    // empty ranks
      {2, 2, 2, 4, 8, 64},  {2, 2, 2, 4, 16, 37}, {2, 2, 1, 4, 8, 3},                         // USP
  };
  for (const Case& c : cases) run_case(c);
}

TEST_CASE("Ulysses: heads not divisible by the degree is a clear error", "[parallel][attention]") {
  auto hash = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      auto timeout = std::chrono::milliseconds(20000);
      auto pg = ProcessGroup::create_world(RendezvousStore::wrap(hash, 3, timeout), r, 3, {timeout});
      auto attn = make_sequence_parallel_attention(pg, nullptr);
      SelfAttentionShape s;
      s.batch = 1;
      s.local_tokens = split_tokens(12, 3, r).size();
      s.total_tokens = 12;
      s.heads = 4;
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
    CHECK(e.find("4 heads") != std::string::npos);
    CHECK(e.find("Ulysses degree 3") != std::string::npos);
  }
}
