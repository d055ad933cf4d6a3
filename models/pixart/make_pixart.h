// The PixArt presets of dit-make-model: a complete PixArtSigmaPipeline directory with random
// weights in the real layout (model_index.json, transformer/, text_encoder/ (T5), tokenizer/
// (a small trained SentencePiece model), vae/, scheduler/).
//
//   pixart-demo: 256×256 images, a DiT-S/2-sized transformer, a 4-layer T5 (the quick demo)
//   pixart-xl:   PixArt-Σ-XL-2-1024-MS dimensions with T5-XXL (--layers, --text-layers shorten)
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "models/make_model.h"

namespace dit {

std::vector<std::string> pixart_preset_names();
void write_pixart_pipeline(const MakeModelOptions& opt, const std::filesystem::path& dir);

}  // namespace dit
