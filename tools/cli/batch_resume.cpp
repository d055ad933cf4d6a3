#include "tools/cli/batch_resume.h"

#include <filesystem>
#include <sstream>

#include "runtime/error.h"
#include "runtime/png.h"

namespace dit::cli {

bool parameters_match(const std::string& text, const Request& req, const ModelInfo& info, const std::string& dtype) {
  const int W = req.width ? req.width : info.default_width, H = req.height ? req.height : info.default_height;
  std::ostringstream g;  // formatted as the pipeline formats it (default ostream precision)
  g << req.guidance_scale;
  std::ostringstream head;
  head << req.prompt << "\nSteps: " << req.steps << ", Sampler: " << (req.sampler.empty() ? info.default_sampler : req.sampler)
       << ", CFG scale: " << g.str() << ", Seed: " << req.seed << ", Size: " << W << "x" << H
       << ", Model: " << info.name << ", Class: ";
  const std::string h = head.str();
  if (text.compare(0, h.size(), h) != 0) return false;
  // The dtype follows the class label (which may itself contain ", "): take the last one.
  const std::string key = ", Dtype: ";
  const size_t d = text.rfind(key);
  if (d == std::string::npos || d < h.size()) return false;
  const size_t v = d + key.size();
  const size_t end = text.find(", ", v);
  return text.substr(v, end == std::string::npos ? std::string::npos : end - v) == dtype;
}

bool output_is_done(const std::string& path, const Request& req, const ModelInfo& info, const std::string& dtype) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    return parameters_match(read_png_text(path, "parameters"), req, info, dtype);
  } catch (const Error&) {
    return false;  // corrupt or foreign file: generate it again
  }
}

}  // namespace dit::cli
