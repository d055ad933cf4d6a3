// Resuming a batch: an item whose PNG already exists is skipped when the parameters embedded
// in it (Result::parameters, models/pipeline.cpp) say it is the same image:
//
//   <prompt>\nSteps: N, Sampler: S, CFG scale: G, Seed: S, Size: WxH, Model: NAME,
//   Class: ID (LABEL), Dtype: D, Version: dit-gen X
//
// Compared: prompt, steps, sampler (resolved: "" is the model's default), CFG scale, seed,
// size (resolved: 0 is the model's default), model name and dtype. Not the version, and not
// the class (the prompt and the model decide it).
#pragma once

#include <string>

#include "models/dit_gen.h"

namespace dit::cli {

// Whether `parameters` (a PNG's embedded text) describes the image `req` gives with this
// model and dtype: the text must start with "<prompt>\nSteps: ... Model: NAME, Class: " as
// the pipeline writes it for req, and its last ", Dtype: " field must be `dtype`.
bool parameters_match(const std::string& parameters, const Request& req, const ModelInfo& info,
                      const std::string& dtype);

// True when `path` is a PNG whose "parameters" text matches (false for a missing, unreadable
// or corrupt file, or a PNG without parameters).
bool output_is_done(const std::string& path, const Request& req, const ModelInfo& info, const std::string& dtype);

}  // namespace dit::cli
