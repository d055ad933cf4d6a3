// Command-line parsing for every tool's main(): CLI11, with dit-gen's rule for errors —
// one line, "<program>: error: <message>", and no "Run with --help for more information."
// (CLI11's app.exit adds that second line). --help and --version print as usual. CLI11's
// count errors are said in the user's terms ("--steps: given 2 times; give it once" for "At
// Most 1 required but received 2"); a message of another form is printed as CLI11 wrote it.
//
//   if (auto rc = dit::parse_args(app, argc, argv, "dit-bench")) return *rc;
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <regex>
#include <string>

namespace dit {

// CLI11's message for a parse error, its count errors (CLI::ArgumentMismatch) reworded.
inline std::string cli_error_message(const CLI::ParseError& e) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) == nullptr) return what;
  static const std::regex at_most(R"(^(.+): At Most (\d+) required but received (\d+)$)");
  static const std::regex at_least(R"(^(.+): At least (\d+) required but received (\d+)$)");
  static const std::regex missing(R"(^(.+): (\d+) required (\S+) missing$)");
  std::smatch m;
  if (std::regex_match(what, m, at_most))
    return m.str(1) + (m.str(2) == "1" ? ": given " + m.str(3) + " times; give it once"
                                       : ": at most " + m.str(2) + " values, got " + m.str(3));
  if (std::regex_match(what, m, at_least)) return m.str(1) + ": at least " + m.str(2) + " values, got " + m.str(3);
  if (std::regex_match(what, m, missing))
    return m.str(1) + ": expects " + (m.str(2) == "1" ? "a value" : m.str(2) + " values") + " (" + m.str(3) + ")";
  return what;
}

// nullopt: parsed, go on. A value: the exit code to return (0 after --help/--version).
inline std::optional<int> parse_args(CLI::App& app, int argc, char** argv, const char* program) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "%s: error: %s\n", program, cli_error_message(e).c_str());
    return e.get_exit_code();
  }
}

}  // namespace dit
