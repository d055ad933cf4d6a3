// PixArt's resolution binning tables (diffusers' ASPECT_RATIO_256/512/1024_BIN of the α
// pipeline and ASPECT_RATIO_2048_BIN of the Σ pipeline): aspect-ratio keys (h/w) and the
// [height, width] in pixels generated for them (docs/pixart.md).
#pragma once

#include <vector>

#include "models/model_family.h"

namespace dit {

// The table a PixArt pipeline picks from transformer.config.sample_size: Σ with 256 -> 2048;
// 128 -> 1024; 64 -> 512; 32 -> 256; anything else: none (empty).
std::vector<AspectBin> pixart_aspect_bins(int sample_size, bool sigma);

}  // namespace dit
