// dit-gen's one error type. Every failure a user can cause (bad file, bad flag, failed
// rank) is reported as dit::Error with enough context to act on: the file, the tensor
// name, the rank. Library errors (dnnl::error, gloo::IoException, std::system_error)
// are translated into it at the boundary where they are caught.
//
//   throw dit::Error("safetensors: " + path + ": tensor '" + name + "': offsets past end of file");
//   DIT_CHECK(n > 0, "steps must be > 0, got " << n);
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dit {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
  // The same error with "context: " put in front (e.g. the file or rank it happened in).
  Error with_context(const std::string& context) const { return Error(context + ": " + what()); }
};

}  // namespace dit

// Throws dit::Error with a message built from stream operands when cond is false.
#define DIT_CHECK(cond, msg)                       \
  do {                                             \
    if (!(cond)) {                                 \
      std::ostringstream dit_check_os_;            \
      dit_check_os_ << msg;                        \
      throw ::dit::Error(dit_check_os_.str());     \
    }                                              \
  } while (0)

#define DIT_FAIL(msg)                              \
  do {                                             \
    std::ostringstream dit_check_os_;              \
    dit_check_os_ << msg;                          \
    throw ::dit::Error(dit_check_os_.str());       \
  } while (0)
