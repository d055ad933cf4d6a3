// The PixArt family (PixArt-α and PixArt-Σ): PixArtAlphaPipeline / PixArtSigmaPipeline, a
// text-conditioned transformer with adaLN-single (norm_type ada_norm_single) and
// cross-attention to T5 states, prompts encoded by models/t5/.
#pragma once

#include "models/model_family.h"

namespace dit {

LoadedFamily load_pixart_family(const LoadOptions& opt, const ModelIndex& index, const Config& transformer_config);

}  // namespace dit
