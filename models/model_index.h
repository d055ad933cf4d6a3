// model_index.json of a diffusers pipeline directory: which pipeline it is, its
// components, and (for class-conditional DiT) the id2label table used to resolve prompts.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dit {

struct ModelIndex {
  std::string dir;
  std::string pipeline_class;                  // "DiTPipeline"
  std::map<std::string, std::string> components;  // name -> class name ("transformer" -> "Transformer2DModel")
  std::map<int, std::string> id2label;         // class id -> "tench, Tinca tinca"

  // Reads <dir>/model_index.json; unknown pipelines are an error naming what is supported.
  static ModelIndex load(const std::string& dir);
};

struct ClassChoice {
  int id = 0;
  std::string label;  // the full id2label entry ("" when the model has no labels)
};

// Resolves a prompt to a class: a bare class id ("207"), or a case-insensitive match of any
// comma-separated synonym in id2label ("golden retriever"). An unknown prompt is an error
// listing the closest labels. `num_classes` bounds bare ids.
ClassChoice resolve_class(const ModelIndex& index, const std::string& prompt, int num_classes);

}  // namespace dit
