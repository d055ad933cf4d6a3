// The batch-line fuzz target's stored inputs (seeds and regressions) through its harness.
#include "tests/fuzz/batch_line_target.h"
#include "tests/fuzz/fuzz_inputs.h"

TEST_CASE("fuzz inputs: batch file parser", "[batch][fuzz]") {
  dit_fuzz::run_stored_inputs("batch_line", dit_fuzz::batch_line);
}
