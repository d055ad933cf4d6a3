#include "tools/cli/batch_progress.h"

#include <cmath>
#include <cstdio>

#include "runtime/json_line.h"
#include "runtime/printable.h"

namespace dit::cli {

namespace {

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--";
  const long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

}  // namespace

void BatchProgress::emit(const ordered_json& j) const {
  if (mode_ != ProgressMode::Json) return;
  std::fprintf(stderr, "%s\n", json_line(j).c_str());
  std::fflush(stderr);
}

BatchProgress::BatchProgress(ProgressMode mode, int total, int to_generate, int replicas)
    : mode_(mode), total_(total), to_generate_(to_generate), replicas_(replicas),
      start_(std::chrono::steady_clock::now()) {
  emit({{"event", "batch_start"}, {"total", total_}, {"to_generate", to_generate_}, {"replicas", replicas_}});
}

double BatchProgress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void BatchProgress::step(const std::vector<int>& indices, int step, int total, double step_seconds, double el,
                         int replica) {
  if (mode_ == ProgressMode::Json) {
    for (int i : indices)
      emit({{"event", "step"}, {"index", i}, {"step", step}, {"total", total}, {"step_seconds", step_seconds},
            {"elapsed", el}, {"replica", replica}});
  } else if (mode_ == ProgressMode::Bar && replica == 0) {
    current_ = indices.size() == 1 ? "item " : "items ";
    for (size_t k = 0; k < indices.size(); ++k) current_ += (k ? "," : "") + std::to_string(indices[k]);
    current_ += ": step " + std::to_string(step) + "/" + std::to_string(total);
    draw();
  }
}

void BatchProgress::draw() {
  const int done = generated_ + skipped_ + failed_;
  const int width = 24;
  const int filled = total_ > 0 ? int(std::lround(double(width) * done / total_)) : width;
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  const double el = elapsed();
  const double rate = el > 0 ? generated_ / el * 60.0 : 0;  // images per minute
  const double eta = generated_ > 0 ? (total_ - done) / (rate / 60.0) : NAN;
  std::fprintf(stderr, "\r  %d/%d items [%s] %.1f img/min, ETA %s%s%s   ", done, total_, bar.c_str(), rate,
               fmt_duration(eta).c_str(), current_.empty() ? "" : " | ", current_.c_str());
  std::fflush(stderr);
  open_line_ = true;
}

void BatchProgress::item(const ItemRecord& r) {
  if (r.status == "done") ++generated_;
  else if (r.status == "skipped") ++skipped_;
  else ++failed_;
  const int done = generated_ + skipped_ + failed_;
  if (mode_ == ProgressMode::Json) {
    ordered_json j = {{"event", "item_done"}, {"index", r.index},  {"status", r.status},
                      {"output", r.output},    {"seconds", r.seconds}, {"done", done},
                      {"total", total_}};
    if (!r.error.empty()) j["error"] = r.error;
    emit(j);
    return;
  }
  if (r.status == "failed") {
    if (open_line_) std::fputc('\n', stderr);
    open_line_ = false;
    std::fprintf(stderr, "dit-gen: item %d failed: %s\n", r.index, printable(r.error, 4096).c_str());
  }
  if (mode_ == ProgressMode::Bar) {
    current_.clear();
    draw();
  }
  std::fflush(stderr);
}

int BatchProgress::finish(const std::string& results_path) {
  if (open_line_) std::fputc('\n', stderr);
  open_line_ = false;
  const double el = elapsed();
  const double rate = el > 0 ? generated_ / el * 60.0 : 0;
  emit({{"event", "batch_done"}, {"total", total_}, {"generated", generated_}, {"skipped", skipped_},
        {"failed", failed_}, {"seconds", el}, {"images_per_minute", rate}, {"results", results_path}});
  std::fprintf(stderr, "dit-gen: batch: %d items: %d generated, %d skipped, %d failed in %.1f s (%.2f images/min); %s\n",
               total_, generated_, skipped_, failed_, el, rate, results_path.c_str());
  std::fflush(stderr);
  return failed_;
}

}  // namespace dit::cli
