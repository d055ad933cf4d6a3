// Command-line parsing for every tool's main(): CLI11, with dit-gen's rule for errors —
// one line, "<program>: error: <message>", and no "Run with --help for more information."
// (CLI11's app.exit adds that second line). --help and --version print as usual.
//
//   if (auto rc = dit::parse_args(app, argc, argv, "dit-bench")) return *rc;
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>

namespace dit {

// nullopt: parsed, go on. A value: the exit code to return (0 after --help/--version).
inline std::optional<int> parse_args(CLI::App& app, int argc, char** argv, const char* program) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return e.get_exit_code();
  }
}

}  // namespace dit
