// The bundled demo models, created on first use (random weights: their images are noise):
//   dit-demo     DiT-S/2-like class-conditional model (the default without --model);
//                in $DIT_DEMO_MODEL, else $XDG_CACHE_HOME/dit-gen/demo-model, else ~/.cache/dit-gen/demo-model
//   pixart-demo  PixArt-Σ layout with a small T5 and tokenizer (text-to-image, 256x256);
//                in $DIT_PIXART_DEMO_MODEL, else <cache>/dit-gen/pixart-demo
#pragma once

#include <string>

namespace dit::cli {

// True for "dit-demo" and "pixart-demo" when no such directory exists (a path wins).
bool is_demo_name(const std::string& model);
// The directory of a demo ("" = the default, dit-demo).
std::string demo_model_dir(const std::string& name = "");
// Creates that demo there if it is missing (announcing it on stderr); returns the directory.
std::string ensure_demo_model(const std::string& name = "");
// The pipeline directory --model names: a path, a demo name, or "" (the default demo).
std::string model_dir_of(const std::string& model);

}  // namespace dit::cli
