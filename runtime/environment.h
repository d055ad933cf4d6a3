// Two readings of the environment that several parts of dit-gen share:
//
//   if (const char* v = dit::env_nonempty("DIT_IFACE")) use(v);   // set and not empty
//   std::string d = dit::user_cache_dir("weights");                 // "" when there is no home
#pragma once

#include <string>

namespace dit {

// The value of environment variable `name`, or null where it is unset or empty (an empty
// value means "not given", as in a shell's `VAR= dit-gen ...`).
const char* env_nonempty(const char* name);

// dit-gen's cache directory for `what` ("weights", "bench", "demo-model"):
// $XDG_CACHE_HOME/dit-gen/<what>, else $HOME/.cache/dit-gen/<what>; "" where neither is set
// (the caller decides: no cache, or a temporary directory).
std::string user_cache_dir(const std::string& what);

}  // namespace dit
