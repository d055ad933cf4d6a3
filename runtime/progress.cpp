#include "runtime/progress.h"

#include <unistd.h>

#include <cmath>

#include "runtime/error.h"

namespace dit {

ProgressMode parse_progress_mode(const std::string& s) {
  if (s == "auto") return ::isatty(STDERR_FILENO) ? ProgressMode::Bar : ProgressMode::None;
  if (s == "bar") return ProgressMode::Bar;
  if (s == "json") return ProgressMode::Json;
  if (s == "none") return ProgressMode::None;
  DIT_FAIL("--progress: unknown mode '" << s << "' (expected auto, bar, json or none)");
}

void Progress::step(int step, int total, double step_seconds, double elapsed) {
  if (mode_ == ProgressMode::Json) {
    event("step", {{"step", step}, {"total", total}, {"step_seconds", step_seconds}, {"elapsed", elapsed}});
  } else if (mode_ == ProgressMode::Bar) {
    const int width = 30;
    const int filled = total > 0 ? int(std::lround(double(width) * step / total)) : width;
    const double per = step > 0 ? elapsed / step : 0;
    const double eta = per * (total - step);
    std::string bar(size_t(filled), '#');
    bar.resize(width, '.');
    std::fprintf(out_, "\r  %*d/%d [%s] %.2f s/it, ETA %.0f s   ", int(std::to_string(total).size()), step, total,
                 bar.c_str(), per, eta);
    std::fflush(out_);
    open_line_ = true;
  }
}

void Progress::finish() {
  if (open_line_) {
    std::fputc('\n', out_);
    std::fflush(out_);
    open_line_ = false;
  }
}

void Progress::event(const std::string& name, const ordered_json& fields) {
  if (mode_ != ProgressMode::Json) return;
  ordered_json j = {{"event", name}};
  for (const auto& [k, v] : fields.items()) j[k] = v;
  std::fprintf(out_, "%s\n", json_line(j).c_str());
  std::fflush(out_);
}

}  // namespace dit
