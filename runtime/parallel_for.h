// parallel_for: an OpenMP static loop that runs inline when it would get one thread.
// libgomp allocates a fresh team for every parallel region of one thread (`if(false)`,
// num_threads(1), or OMP_NUM_THREADS=1), so the hot loops of the denoising step go through
// here to stay allocation-free (tests/models/test_no_alloc.cpp) and skip the region's cost.
#pragma once

#include <omp.h>

#include <cstdint>

namespace dit {

template <class F>
inline void parallel_for(int64_t n, bool parallel, F&& f, int max_threads = 0) {
  const int nthr = max_threads > 0 ? max_threads : omp_get_max_threads();
  if (!parallel || n <= 1 || nthr <= 1 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(nthr)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace dit
