#include "runtime/environment.h"

#include <cstdlib>

namespace dit {

const char* env_nonempty(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

std::string cache_dir(const char* override_var, const std::string& what, const std::string& fallback) {
  if (const char* v = env_nonempty(override_var)) return v;
  if (const char* x = env_nonempty("XDG_CACHE_HOME")) return std::string(x) + "/dit-gen/" + what;
  if (const char* h = env_nonempty("HOME")) return std::string(h) + "/.cache/dit-gen/" + what;
  return fallback;
}

}  // namespace dit
