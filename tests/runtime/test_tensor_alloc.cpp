// Tensor::empty: zeroed, 64-byte aligned storage at every size. Large tensors are anonymous
// mappings, zero without a pass over them, so that their pages become resident only where
// written (a VAE decoder sizes its buffers for the largest layer, and zeroing 134 MB of
// them on one thread was 0.18 s of its set-up).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/tensor.h"

namespace {

int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * int64_t(::sysconf(_SC_PAGESIZE));
}

bool all_zero(const dit::Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i)
    if (p[i]) return false;
  return true;
}

}  // namespace

TEST_CASE("Tensor::empty is zeroed and aligned, small and large", "[runtime][tensor]") {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1 << 20) - 3, int64_t(1 << 20), int64_t(3 << 20) + 5}) {
    INFO("elements " << n);
    for (int round = 0; round < 2; ++round) {  // the second reuses what the first freed
      dit::Tensor t = dit::Tensor::empty({n});
      CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
      CHECK(all_zero(t));
      float* f = t.f32();
      for (int64_t i = 0; i < n; ++i) f[i] = float(i + 1);  // dirty it for the next round
      CHECK(f[n - 1] == float(n));
    }
  }
  dit::Tensor b = dit::Tensor::empty({7, 3}, dit::DType::BF16);
  CHECK(b.nbytes() == 42);
  CHECK(all_zero(b));
}

TEST_CASE("Tensor::empty of 256 MB makes only the pages written resident", "[runtime][tensor]") {
  const int64_t before = resident_bytes();
  dit::Tensor t = dit::Tensor::empty({64 << 20});  // 256 MB of f32
  const int64_t after_alloc = resident_bytes();
  CHECK(after_alloc - before < (16 << 20));
  t.f32()[0] = 1.f;
  t.f32()[(64 << 20) - 1] = 2.f;
  CHECK(resident_bytes() - before < (16 << 20));
  CHECK(t.f32()[1 << 20] == 0.f);
}

// Large tensors start on a 2 MB boundary and their mapping carries MADV_HUGEPAGE (VmFlags
// "hg" in /proc/self/smaps), so that where transparent huge pages are enabled for madvise
// (the default on many distributions) each first write faults in 2 MB, not 4 KB.
TEST_CASE("Tensor::empty maps large tensors 2 MB-aligned with transparent huge pages advised", "[runtime][tensor]") {
  for (int64_t n : {int64_t(1) << 20, (int64_t(5) << 20) + 7}) {
    INFO("elements " << n);
    dit::Tensor t = dit::Tensor::empty({n});
    const auto addr = reinterpret_cast<uintptr_t>(t.data());
    CHECK(addr % (uintptr_t(2) << 20) == 0);
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool inside = false, found = false, advised = false;
    while (std::getline(smaps, line)) {
      unsigned long lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
        inside = lo <= addr && addr < hi;
        if (inside) {
          found = true;
          CHECK(hi - lo >= t.nbytes());
        }
      } else if (inside && line.rfind("VmFlags:", 0) == 0) {
        advised = (line + " ").find(" hg ") != std::string::npos;
      }
    }
    CHECK(found);
    CHECK(advised);
    t.f32()[n - 1] = 1.f;  // the tail past the last 2 MB boundary is mapped too
  }
}

TEST_CASE("Tensor::as<T> is f32() or bf16(), and for_element_type picks T by dtype", "[runtime][tensor]") {
  dit::Tensor f = dit::Tensor::empty({3}), b = dit::Tensor::empty({3}, dit::DType::BF16);
  CHECK(f.as<float>() == f.f32());
  CHECK(b.as<uint16_t>() == b.bf16());
  const dit::Tensor& cb = b;
  CHECK(cb.as<uint16_t>() == cb.bf16());
  CHECK_THROWS_WITH(f.as<uint16_t>(), Catch::Contains("is f32, not bf16"));
  CHECK_THROWS_WITH(b.as<float>(), Catch::Contains("is bf16, not f32"));
  for (dit::Tensor* t : {&f, &b}) {
    const size_t size = dit::for_element_type(t->dtype(), [&](auto tag) {
      t->as<decltype(tag)>()[1] = decltype(tag)(7);
      return sizeof(tag);
    });
    CHECK(size == dit::dtype_size(t->dtype()));
  }
  CHECK(f.f32()[1] == 7.f);
  CHECK(b.bf16()[1] == 7);
}
