// The bundled demo model: a DiT-S/2-like pipeline with random weights, created on first use.
#pragma once

#include <string>

namespace dit::cli {

// $DIT_DEMO_MODEL, else $XDG_CACHE_HOME/dit-gen/demo-model, else ~/.cache/dit-gen/demo-model.
std::string demo_model_dir();
// Creates the demo model there if it is missing (announcing it on stderr); returns the directory.
std::string ensure_demo_model();

}  // namespace dit::cli
