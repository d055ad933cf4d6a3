// Writes a complete diffusers-layout DiT pipeline directory with random weights
// (model_index.json, transformer/, vae/, scheduler/) — for tests, the demo and benchmarks,
// since real checkpoints cannot be downloaded here. The layout, names and configs are
// exactly those of facebook/DiT-XL-2-256, so the loader cannot tell the difference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace dit {

struct MakeModelOptions {
  std::string preset = "tiny";  // tiny | small | demo | xl
  std::string out_dir;
  uint64_t seed = 0;
  DType dtype = DType::F32;
  int shards = 1;               // >1: sharded transformer with an index.json
  int layers = 0;               // >0: override the preset's transformer depth
};

std::vector<std::string> model_presets();
// Creates out_dir (which must not exist or be empty) and writes the model; atomic at the
// directory level: written to a temporary sibling and renamed.
void make_model(const MakeModelOptions& opt);

}  // namespace dit
