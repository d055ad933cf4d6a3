// libFuzzer harness: the batch-file parser of `dit-gen --batch` (see batch_line_target.h).
//
//   build-fuzz/bin/fuzz_batch_line -dict=tests/data/fuzz/batch_line/dict \
//       corpus/batch_line tests/data/fuzz/batch_line/seeds
#include <cstddef>
#include <cstdint>

#include "batch_line_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return dit_fuzz::batch_line(data, size); }
