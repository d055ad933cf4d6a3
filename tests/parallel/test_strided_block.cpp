// copy_block_parallel and parallel_split (parallel/strided_block.h): the collectives' large
// copies shared among the calling thread's OpenMP team must put exactly copy_block's bytes in
// exactly copy_block's places, whatever the team size, the block shapes and the range.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "parallel/strided_block.h"
#include "tests/scoped_threads.h"

using namespace dit;

TEST_CASE("strided blocks: a copy shared among threads lands as copy_block's, byte for byte", "[parallel]") {
  std::mt19937 rng(7);
  for (int threads : {1, 2, 3, 7}) {
    dit_test::ScopedThreads t(threads);
    for (int trial = 0; trial < 6; ++trial) {
      // A source block of rows of `wa` floats `sa` apart and a destination of rows of `wb` floats:
      // a logical range crossing rows at different places on each side (as the all-to-all's pieces).
      const size_t wa = 1 + rng() % 5000, wb = 1 + rng() % 7000;
      const size_t sa = wa + rng() % 9, sb = wb + rng() % 9;
      const size_t n = (size_t(1) << 17) + rng() % (size_t(3) << 18);  // 0.5–3.5 MB of floats
      const size_t from = rng() % 1000, to = rng() % 1000;
      const StridedBlock a{rng() % 13, (from + n) / wa + 1, wa, sa}, b{rng() % 13, (to + n) / wb + 1, wb, sb};
      std::vector<float> src(a.offset + a.rows * a.stride);
      for (size_t i = 0; i < src.size(); ++i) src[i] = float(i);
      std::vector<float> want(b.offset + b.rows * b.stride, -1.f), got(want);
      copy_block(src.data(), a, from, want.data(), b, to, n);
      copy_block_parallel(src.data(), a, from, got.data(), b, to, n);
      INFO("threads " << threads << " n " << n << " widths " << wa << ", " << wb << " strides " << sa << ", " << sb
                      << " from " << from << " to " << to);
      REQUIRE(got == want);
    }
  }
}

TEST_CASE("strided blocks: parallel_split covers a range once, in whole cache lines, one part per thread", "[parallel]") {
  for (int threads : {1, 2, 3, 8}) {
    dit_test::ScopedThreads t(threads);
    for (size_t n : {size_t(0), size_t(1000), (kParallelCopyBytes / 4) - 1, kParallelCopyBytes / 4,
                     (size_t(5) << 20) / 4 + 3}) {
      std::vector<int> hits(n, 0);
      int calls = 0, misaligned = 0;
      parallel_split(n, 4, [&](size_t first, size_t len) {
        for (size_t i = first; i < first + len; ++i) ++hits[i];  // parts are disjoint: no race
#pragma omp atomic
        ++calls;
        if (first % 16 != 0) {  // a part not starting a whole number of cache lines in
#pragma omp atomic
          ++misaligned;
        }
      });
      INFO("threads " << threads << " n " << n << " parts " << calls);
      CHECK(misaligned == 0);
      for (size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
      const bool small = n * 4 < kParallelCopyBytes;
      CHECK(calls <= (small ? 1 : threads));
      if (!small && threads > 1) CHECK(calls > 1);
    }
  }
}
