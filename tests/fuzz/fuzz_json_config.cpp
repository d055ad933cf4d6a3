// libFuzzer harness: the JSON config reader. The input is a config file's text; it is
// parsed with Config::parse and every key of it (and of nested objects, two levels deep)
// is read with every typed getter, with and without a default, so each type mismatch
// path runs. Only dit::Error may come out.
//
//   build-fuzz/bin/fuzz_json_config -dict=tests/data/fuzz/json_config/dict \
//       corpus/json_config tests/data/fuzz/json_config/seeds
#include <cstddef>
#include <cstdint>

#include "json_config_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return dit_fuzz::json_config(data, size); }
