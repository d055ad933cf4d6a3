// The calling thread's OpenMP team size set for one scope, then put back as it was.
#pragma once

#include <omp.h>

namespace dit_test {

class ScopedThreads {
 public:
  explicit ScopedThreads(int n) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int saved_ = omp_get_max_threads();
};

}  // namespace dit_test
