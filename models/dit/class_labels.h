// Class-conditional prompts: an ImageNet-style label resolved against model_index.json's
// id2label (any comma-separated synonym, case-insensitive), or a bare class id.
#pragma once

#include <string>

#include "models/model_index.h"

namespace dit {

struct ClassChoice {
  int id = 0;
  std::string label;  // the full id2label entry ("" when the model has no labels)
};

// Resolves a prompt to a class: a bare class id ("207"), or a case-insensitive match of any
// comma-separated synonym in id2label ("golden retriever"). An unknown prompt is an error
// listing the closest labels (prompts longer than kMaxClassPrompt bytes are refused without
// suggestions: matching is quadratic in the length). `num_classes` bounds bare ids.
ClassChoice resolve_class(const ModelIndex& index, const std::string& prompt, int num_classes);

constexpr size_t kMaxClassPrompt = 256;

}  // namespace dit
