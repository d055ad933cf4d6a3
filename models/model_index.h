// model_index.json of a diffusers pipeline directory: which pipeline it is, its components,
// and (class-conditional DiT) the id2label table. Which family runs it: models/model_family.h.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dit {

struct ModelIndex {
  std::string dir;
  std::string pipeline_class;                  // "DiTPipeline", "PixArtSigmaPipeline", ...
  std::map<std::string, std::string> components;  // name -> class name ("transformer" -> "Transformer2DModel")
  std::map<int, std::string> id2label;         // class id -> "tench, Tinca tinca"

  // Reads <dir>/model_index.json (the directory and the file must exist; transformer, vae and
  // scheduler components must be listed).
  static ModelIndex load(const std::string& dir);
};

// The transformer's attention heads (transformer/config.json num_attention_heads; the key every
// diffusion transformer family uses), read without loading the model: for checks made before
// any rank starts. Throws dit::Error naming the file.
int peek_attention_heads(const std::string& dir);

}  // namespace dit
