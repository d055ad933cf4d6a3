// The tokenizer fuzz target's stored inputs (seeds and regressions) through its harness.
#include "tests/fuzz/fuzz_inputs.h"
#include "tests/fuzz/tokenizer_target.h"

TEST_CASE("fuzz inputs: T5 tokenizer and prompt path", "[t5][fuzz]") {
  dit_fuzz::run_stored_inputs("tokenizer", dit_fuzz::tokenizer);
}
