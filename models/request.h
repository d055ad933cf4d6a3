// The one request validator and the one parameters formatter, used by the pipeline (before
// generating) and by the CLI (batch validation, resume) through Pipeline::resolve and
// Pipeline::parameters.
#pragma once

#include <string>

#include "models/dit_gen.h"
#include "models/model_family.h"
#include "runtime/dtype.h"

namespace dit {

// Limits on what a request may ask for (a hostile batch line must not stall a batch).
constexpr int kMaxSide = 8192;                  // pixels per side
constexpr int64_t kMaxPixels = 4096LL * 4096;   // pixels per image
constexpr int kMaxSteps = 1000;
constexpr int kMaxSequenceLength = 4096;        // text tokens

// Checks `req` against the model and fills in every default (see ResolvedRequest). `cfg_split`:
// the run splits the guidance halves over rank groups (--cfg-parallel), so guidance must be on.
ResolvedRequest resolve_request(const Request& req, const ModelInfo& info, const FamilyRules& rules,
                                const Conditioner& conditioner, bool cfg_split, int decode_parts = 1);

// "<prompt>\n[Negative prompt: <negative>\n]Steps: N, Sampler: S, CFG scale: G, Seed: S, Size: WxH,
//  [Generation size: WxH, ]Model: NAME, [Class: ID (LABEL), ][Max sequence length: L, ]Dtype: D,
//  [VAE dtype: V (when it is not D), ]Version: dit-gen X"
std::string format_parameters(const ResolvedRequest& r, const ModelInfo& info, DType dtype, DType vae_dtype);

// The aspect-ratio bin nearest to height/width (first bin wins ties), as diffusers'
// classify_height_width_bin picks it.
const AspectBin& nearest_bin(const std::vector<AspectBin>& bins, int height, int width);

}  // namespace dit
