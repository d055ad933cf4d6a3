// The model families dit-gen knows: one line each. A new family is a folder under models/
// with a loader, and one line here.
#include <sstream>

#include "models/dit/dit_family.h"
#include "models/model_family.h"
#include "models/pixart/pixart_family.h"
#include "runtime/error.h"
#include "runtime/json_config.h"

namespace dit {

const std::vector<FamilyEntry>& model_families() {
  static const std::vector<FamilyEntry> families = {
      {"dit", {"DiTPipeline"}, "DiTTransformer2DModel", "ada_norm_zero", load_dit_family},
      {"pixart", {"PixArtSigmaPipeline", "PixArtAlphaPipeline"}, "PixArtTransformer2DModel", "ada_norm_single",
       load_pixart_family},
  };
  return families;
}

namespace {

// diffusers' legacy class, remapped by norm_type to the family's own class on load.
constexpr const char* kLegacyTransformer = "Transformer2DModel";

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::string supported_pipelines() {
  std::vector<std::string> all;
  for (const FamilyEntry& f : model_families()) all.insert(all.end(), f.pipelines.begin(), f.pipelines.end());
  return join(all);
}

const FamilyEntry& find_family(const ModelIndex& index, const Config& tc) {
  const FamilyEntry* family = nullptr;
  for (const FamilyEntry& f : model_families())
    for (const std::string& p : f.pipelines)
      if (p == index.pipeline_class) family = &f;
  DIT_CHECK(family, index.dir << "/model_index.json: pipeline '" << index.pipeline_class
                              << "' is not supported (supported: " << supported_pipelines() << ")");

  const std::string src = tc.source();
  std::vector<std::string> classes = {kLegacyTransformer};
  for (const FamilyEntry& f : model_families()) classes.push_back(f.transformer_class);
  const std::string cls = tc.get_string("_class_name", family->transformer_class);
  const FamilyEntry* by_class = nullptr;
  for (const FamilyEntry& f : model_families())
    if (f.transformer_class == cls) by_class = &f;
  DIT_CHECK(cls == kLegacyTransformer || by_class,
            src << ": transformer class '" << cls << "' is not supported (supported: " << join(classes) << ")");
  // diffusers' defaults: Transformer2DModel's norm_type is layer_norm (not a diffusion
  // transformer we know); a family's own class implies its norm.
  const std::string norm = tc.get_string("norm_type", by_class ? by_class->norm_type : "layer_norm");
  DIT_CHECK(norm == family->norm_type, src << ": norm_type '" << norm << "' is not supported by "
                                           << index.pipeline_class << " (supported: " << family->norm_type << ")");
  DIT_CHECK(!by_class || by_class == family, src << ": transformer class '" << cls << "' does not belong in a "
                                                 << index.pipeline_class << " (expected " << kLegacyTransformer
                                                 << " or " << family->transformer_class << ")");
  return *family;
}

}  // namespace dit
