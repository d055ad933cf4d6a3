// Two readings of the environment that several parts of dit-gen share:
//
//   if (const char* v = dit::env_nonempty("DIT_IFACE")) use(v);   // set and not empty
//   std::string d = dit::cache_dir("DIT_WEIGHT_CACHE", "weights");  // "" when there is no home
#pragma once

#include <string>

namespace dit {

// The value of environment variable `name`, or null where it is unset or empty (an empty
// value means "not given", as in a shell's `VAR= dit-gen ...`).
const char* env_nonempty(const char* name);

// Where dit-gen keeps its cache of `what` ("weights", "bench", "demo-model"): $override_var
// where given, else $XDG_CACHE_HOME/dit-gen/<what>, else $HOME/.cache/dit-gen/<what>, else
// `fallback` ("": no cache; or a temporary directory).
std::string cache_dir(const char* override_var, const std::string& what, const std::string& fallback = "");

}  // namespace dit
