// libFuzzer harness: the T5 tokenizer and prompt path (see tokenizer_target.h).
//
//   build-fuzz/bin/fuzz_tokenizer -dict=tests/data/fuzz/tokenizer/dict \
//       corpus/tokenizer tests/data/fuzz/tokenizer/seeds
#include <cstddef>
#include <cstdint>

#include "tokenizer_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return dit_fuzz::tokenizer(data, size); }
