// Every tool's command-line errors are one line, "<tool>: error: <message>" (no "Run with
// --help for more information."), with a non-zero exit; --help still works.
#include <catch2/catch.hpp>

#include "cli_util.h"

using namespace dit_test;

TEST_CASE("command-line parse errors are one line naming the tool", "[cli]") {
  struct Case {
    const char* tool;
    const char* args;
    const char* message;
  } c = GENERATE(Case{"dit-gen", "-p 1 --no-such-flag", "The following argument was not expected: --no-such-flag"},
                 Case{"dit-gen", "-p 1 --steps abc", "--steps"},
                 Case{"dit-gen", "-p 1 --steps 2 --steps 3", "--steps: given 2 times; give it once"},
                 Case{"dit-gen", "-p 1 -W", "--width: expects a value (INT:POSITIVE)"},
                 Case{"dit-bench", "--steps 1 --steps 2", "--steps: given 2 times; give it once"},
                 Case{"dit-make-model", "--preset tiny", "--out is required"},
                 Case{"dit-make-model", "--preset tiny --out /nonexistent/m --dtype f64", "--dtype"},
                 Case{"dit-bench", "--no-such-flag", "--no-such-flag"},
                 Case{"dit-comm-bench", "--no-such-flag", "--no-such-flag"},
                 Case{"dit-kernel-bench", "--no-such-flag", "--no-such-flag"},
                 Case{"dit-kernel-bench", "-t 100000", "--threads"},  // was a SIGSEGV (OpenMP)
                 Case{"dit-kernel-bench", "--runs 0", "--runs"},      // was a SIGSEGV (median of nothing)
                 Case{"dit-t5-bench", "--no-such-flag", "--no-such-flag"},
                 Case{"dit-t5-bench", "--preset tiny -t 100000", "--threads"});  // was a SIGSEGV
  const RunResult r = run(bin(c.tool) + " " + c.args);
  INFO(c.tool << " " << c.args << "\nstderr:\n" << r.err);
  CHECK(r.code != 0);
  CHECK(count_lines(r.err) == 1);
  CHECK(r.err.rfind(std::string(c.tool) + ": error: ", 0) == 0);
  CHECK(r.err.find(c.message) != std::string::npos);
  CHECK(r.err.find("--help for more information") == std::string::npos);
}

TEST_CASE("dit-make-model prints its usage for --help and exits 0", "[cli]") {
  const RunResult r = run(bin("dit-make-model") + " --help");
  CHECK(r.code == 0);
  CHECK(r.out.find("--preset") != std::string::npos);
}
