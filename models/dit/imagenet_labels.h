// A few well-known ImageNet-1k class labels (id -> synonyms), used to label the random
// demo/benchmark models so prompts like "golden retriever" resolve as with real DiT.
#pragma once

#include <string>

namespace dit {

// The label of ImageNet class `id`, or "class <id>" when not in the built-in list.
std::string imagenet_label(int id);

}  // namespace dit
