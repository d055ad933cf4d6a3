// libFuzzer harness: the safetensors reader. The input is a whole .safetensors file; it is
// opened with SafeTensorsFile::open (through a memfd, so the real mmap path runs) and every
// tensor is read with get(), its bytes touched (a view past the mapping would be caught by
// ASan only as a SEGV, so each element is summed).
//
//   build-fuzz/bin/fuzz_safetensors -dict=tests/data/fuzz/safetensors/dict corpus/safetensors tests/data/fuzz/safetensors/seeds
//
// The harness body, shared by the libFuzzer binary (fuzz_<target>.cpp) and the normal
// suite, which runs every seed and regression input through it (test_fuzz_inputs.cpp).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "runtime/safetensors.h"
#include "runtime/tensor.h"

namespace dit_fuzz {

inline int safetensors(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t off = 0;
  while (off < size) {
    const ssize_t n = write(fd, data + off, size - off);
    if (n <= 0) break;
    off += size_t(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  dit_fuzz::accepts([&] {
    auto f = dit::SafeTensorsFile::open(path);
    for (const std::string& name : f->names()) {
      dit_fuzz::accepts([&] {
        dit::Tensor t = f->get(name);
        const uint8_t* p = static_cast<const uint8_t*>(t.data());
        volatile unsigned sum = 0;
        for (size_t i = 0; i < t.nbytes(); ++i) sum = sum + p[i];
      });
    }
    for (const auto& kv : f->metadata()) (void)kv.second.size();
  });
  close(fd);
  return 0;
}

}  // namespace dit_fuzz
