// The test suite's own names: Catch2's console reporter (v2, 80 columns) indents a test name's
// continuation lines past its first ": ", and aborts with an assertion of its own instead of
// reporting when that is past its width: a failure (or a warning, as the bf16 tests give on
// CPUs without bf16) in such a test would show nothing of what failed. And ctest passes each
// name to the binary as an argument, so a name starting with '-' would be read as an option,
// and CMake splits a name at ';'.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "cli_util.h"

using namespace dit_test;

TEST_CASE("test names: each one's first \": \" within the console reporter's width, no leading dash or semicolon", "[cli]") {
  int names = 0;
  for (const char* area : {"runtime", "parallel", "samplers", "models", "tools"}) {
    const RunResult r = run(bin(std::string("test_") + area) + " --list-test-names-only");
    INFO("test_" << area << ": " << r.err);
    REQUIRE(r.code >= 0);
    std::istringstream lines(r.out);
    for (std::string name; std::getline(lines, name);) {
      if (name.empty()) continue;
      ++names;
      INFO(area << ": " << name);
      const size_t colon = name.find(": ");
      CHECK((colon == std::string::npos || colon + 2 < 77));  // Catch2: indent < width 79
      CHECK(name[0] != '-');
      CHECK(name.find(';') == std::string::npos);  // (CMake splits a list there)
    }
  }
  CHECK(names > 300);
}
