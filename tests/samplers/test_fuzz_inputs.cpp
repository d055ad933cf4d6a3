// The scheduler-config fuzz target's stored inputs (seeds and regressions) through its harness.
#include "tests/fuzz/fuzz_inputs.h"
#include "tests/fuzz/scheduler_config_target.h"

TEST_CASE("fuzz inputs: scheduler config to a stepping sampler", "[samplers][fuzz]") {
  dit_fuzz::run_stored_inputs("scheduler_config", dit_fuzz::scheduler_config);
}
