// The DiT presets of dit-make-model: a complete DiTPipeline directory with random weights
// (model_index.json with ImageNet id2label, transformer/, vae/, scheduler/), in exactly the
// layout of facebook/DiT-XL-2-256.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "models/make_model.h"

namespace dit {

// tiny, small (tests), demo (DiT-S/2-like, 256x256), xl (DiT-XL/2 dimensions).
std::vector<std::string> dit_preset_names();
// Writes the pipeline of opt.preset into `dir` (an empty directory).
void write_dit_pipeline(const MakeModelOptions& opt, const std::filesystem::path& dir);

}  // namespace dit
