// The DiT family (facebook/DiT-XL-2): DiTPipeline, a class-conditional transformer with
// adaLN-zero (norm_type ada_norm_zero), prompts that are ImageNet labels or class ids.
#pragma once

#include "models/model_family.h"

namespace dit {

LoadedFamily load_dit_family(const LoadOptions& opt, const ModelIndex& index, const Config& transformer_config);

}  // namespace dit
