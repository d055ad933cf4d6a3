// Writes a complete diffusers-layout pipeline directory with random weights — for tests, the
// demos and benchmarks, since real checkpoints cannot be downloaded here. Each family's
// presets (models/dit/make_dit.h, models/pixart/make_pixart.h) have exactly the layout,
// names and configs of the real checkpoints, so the loader cannot tell the difference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace dit {

struct MakeModelOptions {
  std::string preset = "tiny";  // tiny | small | demo | xl | pixart-demo | pixart-xl
  std::string out_dir;
  uint64_t seed = 0;
  DType dtype = DType::F32;
  int shards = 1;               // >1: sharded transformer with an index.json
  int layers = 0;               // >0: override the preset's transformer depth
  int text_layers = 0;          // >0: override the preset's text-encoder depth (text-to-image)
  int text_shards = 1;          // >1: sharded text encoder (model-0000i-of-0000K.safetensors)
};

std::vector<std::string> model_presets();
// Creates out_dir (which must not exist or be empty) and writes the model; atomic at the
// directory level: written to a temporary sibling and renamed.
void make_model(const MakeModelOptions& opt);

}  // namespace dit
