// The fuzz targets' stored inputs (seeds and regressions) through their harnesses.
#include "tests/fuzz/fuzz_inputs.h"
#include "tests/fuzz/json_config_target.h"
#include "tests/fuzz/safetensors_target.h"

TEST_CASE("fuzz inputs: safetensors reader", "[io][fuzz]") { dit_fuzz::run_stored_inputs("safetensors", dit_fuzz::safetensors); }

TEST_CASE("fuzz inputs: JSON config reader", "[io][fuzz]") { dit_fuzz::run_stored_inputs("json_config", dit_fuzz::json_config); }
