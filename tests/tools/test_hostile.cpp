// The hostile-input suite: each case feeds one tool one hostile input (a corrupt
// checkpoint, a lying config, a broken tokenizer, a bad flag, prompt, batch line,
// rendezvous string, output path or resource request) and expects a one-line refusal
// naming what is wrong, no crash, no hang and nothing written (see hostile_util.h).
#include <catch2/catch.hpp>
#include <set>

#include "hostile_cases_cli.h"
#include "hostile_cases_files.h"
#include "hostile_util.h"

using namespace dit_test::hostile;

namespace {

void run_all(const std::vector<Case>& cases) {
  std::set<std::string> names;
  for (const Case& c : cases) {
    REQUIRE(names.insert(c.name).second);  // names are unique
    run_case(c);
  }
}

}  // namespace

TEST_CASE("hostile: corrupt checkpoints", "[hostile]") { run_all(checkpoint_cases()); }
TEST_CASE("hostile: config JSON", "[hostile]") { run_all(config_cases()); }
TEST_CASE("hostile: tokenizer files", "[hostile]") { run_all(tokenizer_cases()); }
TEST_CASE("hostile: flags", "[hostile]") { run_all(flag_cases()); }
TEST_CASE("hostile: prompts", "[hostile]") { run_all(prompt_cases()); }
TEST_CASE("hostile: batch lines", "[hostile]") { run_all(batch_cases()); }
TEST_CASE("hostile: rendezvous strings", "[hostile]") { run_all(rendezvous_cases()); }
TEST_CASE("hostile: output paths", "[hostile]") { run_all(output_cases()); }
TEST_CASE("hostile: resources", "[hostile]") { run_all(resource_cases()); }

TEST_CASE("hostile: the suite has at least 150 cases", "[hostile]") {
  const size_t n = checkpoint_cases().size() + config_cases().size() + tokenizer_cases().size() +
                   flag_cases().size() + prompt_cases().size() + batch_cases().size() + rendezvous_cases().size() +
                   output_cases().size() + resource_cases().size();
  CHECK(n >= 150);
}
