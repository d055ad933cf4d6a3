// Gloo's errors translated at the boundary: what a user is shown of a Gloo exception.
//
//   catch (const std::exception& e) { DIT_FAIL("rendezvous '" << spec << "': " << clean_gloo_message(e.what())); }
#pragma once

#include <string>

namespace dit {

// A Gloo error message without its "[file:line] " prefixes ("[/build/gloo/.../pair.cc:589]
// Connection closed by peer" -> "Connection closed by peer") and trailing newlines and spaces.
std::string clean_gloo_message(std::string msg);

}  // namespace dit
