// prefault (runtime/prefault.h): every whole page of the buffer resident afterwards (mincore),
// its content unchanged, whatever the alignment and the number of threads.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "runtime/prefault.h"
#include "runtime/tensor.h"
#include "tests/scoped_threads.h"

namespace {

// Of the pages wholly inside [p, p + bytes): how many are resident.
int64_t resident_pages(const void* p, size_t bytes, int64_t* whole) {
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  *whole = e > b ? int64_t((e - b) / page) : 0;
  if (*whole == 0) return 0;
  std::vector<unsigned char> v(static_cast<size_t>(*whole));
  REQUIRE(::mincore(reinterpret_cast<void*>(b), e - b, v.data()) == 0);
  int64_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

}  // namespace

TEST_CASE("prefault makes a fresh mapping resident and keeps what was written", "[runtime][prefault]") {
  for (int threads : {1, 2, 3}) {
    INFO(threads << " threads");
    dit_test::ScopedThreads tc(threads);
    const int64_t n = (int64_t(9) << 20) + 123;  // 36 MB of f32: 2 MB pieces and a 4 KB tail
    dit::Tensor t = dit::Tensor::empty({n});
    float* f = t.f32();
    f[0] = 1.f;
    f[n / 2] = 2.f;
    f[n - 1] = 3.f;
    int64_t whole = 0;
    const int64_t before = resident_pages(f, t.nbytes(), &whole);
    CHECK(whole == int64_t(t.nbytes() / size_t(::sysconf(_SC_PAGESIZE))));
    CHECK(before < whole / 2);  // only what was written
    dit::prefault(f, t.nbytes());
    CHECK(resident_pages(f, t.nbytes(), &whole) == whole);
    CHECK(f[0] == 1.f);
    CHECK(f[n / 2] == 2.f);
    CHECK(f[n - 1] == 3.f);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; ++i) nonzero += f[i] != 0.f;
    CHECK(nonzero == 3);
  }
}

TEST_CASE("prefault of a small, unaligned or empty buffer keeps its bytes", "[runtime][prefault]") {
  dit_test::ScopedThreads tc(2);
  std::vector<unsigned char> v(3 * 4096 + 100);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(i * 7 + 1);
  dit::prefault(v.data() + 3, v.size() - 5);  // a partial page at each end
  dit::prefault(v.data() + 5, 10);            // inside one page: no whole page
  dit::prefault(v.data(), 0);
  dit::prefault(nullptr, 4096);
  for (size_t i = 0; i < v.size(); ++i) {
    INFO("byte " << i);
    REQUIRE(v[i] == static_cast<unsigned char>(i * 7 + 1));
  }
}
