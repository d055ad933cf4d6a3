#include "tools/cli/batch_resume.h"

#include <filesystem>

#include "models/dit_gen.h"
#include "runtime/error.h"
#include "runtime/png.h"

namespace dit::cli {

bool output_is_done(const std::string& path, const std::string& expected) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  try {
    return same_parameters(read_png_text(path, "parameters"), expected);
  } catch (const Error&) {
    return false;  // corrupt or foreign file: generate it again
  }
}

}  // namespace dit::cli
