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

std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += char(c);
        }
    }
  }
  return o + "\"";
}

void Progress::step(int step, int total, double step_seconds, double elapsed) {
  if (mode_ == ProgressMode::Json) {
    std::fprintf(out_, "{\"event\":\"step\",\"step\":%d,\"total\":%d,\"step_seconds\":%.4f,\"elapsed\":%.3f}\n", step,
                 total, step_seconds, elapsed);
    std::fflush(out_);
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

void Progress::event(const std::string& name, const std::string& fields) {
  if (mode_ != ProgressMode::Json) return;
  std::fprintf(out_, "{\"event\":%s%s%s}\n", json_quote(name).c_str(), fields.empty() ? "" : ",", fields.c_str());
  std::fflush(out_);
}

}  // namespace dit
