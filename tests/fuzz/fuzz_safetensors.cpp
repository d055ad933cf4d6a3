// libFuzzer harness: the safetensors reader. The input is a whole .safetensors file; it is
// opened with SafeTensorsFile::open (through a memfd, so the real mmap path runs) and every
// tensor is read with get(), its bytes touched (a view past the mapping would be caught by
// ASan only as a SEGV, so each element is summed).
//
//   build-fuzz/bin/fuzz_safetensors -dict=tests/data/fuzz/safetensors/dict \
//       corpus/safetensors tests/data/fuzz/safetensors/seeds
#include <cstddef>
#include <cstdint>

#include "safetensors_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return dit_fuzz::safetensors(data, size); }
