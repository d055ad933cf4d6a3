#include "tools/cli/batch_progress.h"

#include <cmath>
#include <cstdio>

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

BatchProgress::BatchProgress(ProgressMode mode, int total, int to_generate, int replicas)
    : mode_(mode), total_(total), to_generate_(to_generate), replicas_(replicas),
      start_(std::chrono::steady_clock::now()) {
  if (mode_ == ProgressMode::Json) {
    std::fprintf(stderr, "{\"event\":\"batch_start\",\"total\":%d,\"to_generate\":%d,\"replicas\":%d}\n", total_,
                 to_generate_, replicas_);
    std::fflush(stderr);
  }
}

double BatchProgress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void BatchProgress::step(const std::vector<int>& indices, int step, int total, double step_seconds, double el,
                         int replica) {
  if (mode_ == ProgressMode::Json) {
    for (int i : indices)
      std::fprintf(stderr,
                   "{\"event\":\"step\",\"index\":%d,\"step\":%d,\"total\":%d,\"step_seconds\":%.4f,"
                   "\"elapsed\":%.3f,\"replica\":%d}\n",
                   i, step, total, step_seconds, el, replica);
    std::fflush(stderr);
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
    std::string line = "{\"event\":\"item_done\",\"index\":" + std::to_string(r.index) + ",\"status\":" +
                       json_quote(r.status) + ",\"output\":" + json_quote(r.output);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.3f", r.seconds);
    line += std::string(",\"seconds\":") + secs + ",\"done\":" + std::to_string(done) +
            ",\"total\":" + std::to_string(total_);
    if (!r.error.empty()) line += ",\"error\":" + json_quote(r.error);
    std::fprintf(stderr, "%s}\n", line.c_str());
    std::fflush(stderr);
    return;
  }
  if (r.status == "failed") {
    if (open_line_) std::fputc('\n', stderr);
    open_line_ = false;
    std::fprintf(stderr, "dit-gen: item %d failed: %s\n", r.index, r.error.c_str());
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
  if (mode_ == ProgressMode::Json)
    std::fprintf(stderr,
                 "{\"event\":\"batch_done\",\"total\":%d,\"generated\":%d,\"skipped\":%d,\"failed\":%d,"
                 "\"seconds\":%.3f,\"images_per_minute\":%.3f,\"results\":%s}\n",
                 total_, generated_, skipped_, failed_, el, rate, json_quote(results_path).c_str());
  std::fprintf(stderr, "dit-gen: batch: %d items: %d generated, %d skipped, %d failed in %.1f s (%.2f images/min); %s\n",
               total_, generated_, skipped_, failed_, el, rate, results_path.c_str());
  std::fflush(stderr);
  return failed_;
}

}  // namespace dit::cli
