// Progress reporting for long-running loops: a one-line terminal bar (step, s/it, ETA)
// or one JSON object per line on stderr for wrappers and GUIs.
//
//   Progress p(parse_progress_mode("auto"));       // bar on a terminal, nothing otherwise
//   p.step(i + 1, total, step_seconds, elapsed);   // redraws / emits {"event":"step",...} (runtime/json_line.h)
//   p.finish();
#pragma once

#include <cstdio>
#include <string>

#include "runtime/json_line.h"

namespace dit {

enum class ProgressMode { None, Bar, Json };

// "auto" (bar when stderr is a terminal, else none), "bar", "json", "none"; else dit::Error.
ProgressMode parse_progress_mode(const std::string& s);

class Progress {
 public:
  explicit Progress(ProgressMode mode, std::FILE* out = stderr) : mode_(mode), out_(out) {}
  ProgressMode mode() const { return mode_; }
  // Step `step` of `total` finished after `step_seconds`, `elapsed` since the loop started.
  void step(int step, int total, double step_seconds, double elapsed);
  // Ends the bar's line (no-op otherwise).
  void finish();
  // A JSON event line (json mode only): {"event":"<name>", ...fields}.
  void event(const std::string& name, const ordered_json& fields = ordered_json::object());

 private:
  ProgressMode mode_;
  std::FILE* out_;
  bool open_line_ = false;
};

}  // namespace dit
