// Model families: how a diffusers pipeline directory of one kind is loaded, and the few
// pipeline rules that differ between kinds — as plain data. A family is a folder under
// models/ plus one line in models/registry.cpp; the pipeline (models/pipeline.cpp) is shared.
//
// Dispatch follows diffusers: model_index.json's `_class_name` names the pipeline; the
// transformer's config.json `_class_name` (legacy Transformer2DModel, or the family's own
// class) and its `norm_type` (ada_norm_zero → DiT, ada_norm_single → PixArt; diffusers'
// class remapping) must agree with it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/common/qkv.h"
#include "models/diffusion_model.h"
#include "models/model_index.h"
#include "runtime/dtype.h"
#include "runtime/weight_cache.h"

namespace dit {

class Config;

enum class PromptKind { ClassLabel, Text };

// One entry of an aspect-ratio table (diffusers' ASPECT_RATIO_*_BIN): key ratio h/w, pixels.
struct AspectBin {
  double ratio;
  int height, width;
};

// The pipeline rules of a family, as its diffusers pipeline class applies them.
struct FamilyRules {
  std::string family;                 // shown to users: "DiT", "PixArt-Σ", "PixArt-α"
  PromptKind prompt = PromptKind::ClassLabel;
  int num_classes = 0;                // class-conditional models
  int default_steps = 50;
  double default_guidance = 4.0;
  int default_max_sequence_length = 0;  // text models: tokens of the prompt (0: no text)
  int64_t text_vocab = 0;               // text models: the text encoder's vocabulary
  // Order of the two halves of a guided batch: DiT [cond, uncond], PixArt [uncond, cond].
  bool cond_first = true;
  // Resolution binning (text-to-image): requested sizes snap to the nearest aspect ratio of
  // this table and the image is resized back; empty: no binning.
  std::vector<AspectBin> bins;
};

struct LoadOptions {
  std::string dir;      // the pipeline directory
  ParallelContext* parallel = nullptr;  // how the run is split (tensor-parallel shards of the weights)
  DType dtype = DType::F32;
  QkvProjection qkv = QkvProjection::Auto;
  bool release_text_encoder = true;  // drop the text encoder's resident pages after each encoding
  WeightCacheOption weight_cache;     // half-precision checkpoints under f32 compute (runtime/weight_cache.h)
};

struct LoadedFamily {
  FamilyRules rules;
  std::unique_ptr<DiffusionModel> model;
  std::unique_ptr<Conditioner> conditioner;
};

struct FamilyEntry {
  const char* name;                       // "dit"
  std::vector<std::string> pipelines;     // model_index.json _class_name values
  std::string transformer_class;          // its own class ("DiTTransformer2DModel"); Transformer2DModel also goes
  std::string norm_type;                  // "ada_norm_zero"
  LoadedFamily (*load)(const LoadOptions& opt, const ModelIndex& index, const Config& transformer_config);
};

// Every registered family (models/registry.cpp).
const std::vector<FamilyEntry>& model_families();
// The family of a pipeline directory: throws dit::Error naming the file, the value and what
// is supported when the pipeline class, the transformer class or its norm_type do not match one.
const FamilyEntry& find_family(const ModelIndex& index, const Config& transformer_config);
// "DiTPipeline, PixArtAlphaPipeline, ..." (for messages).
std::string supported_pipelines();

}  // namespace dit
