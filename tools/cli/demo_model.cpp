#include "tools/cli/demo_model.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "models/make_model.h"
#include "runtime/environment.h"
#include "runtime/error.h"

namespace dit::cli {

bool is_demo_name(const std::string& model) {
  return (model == "dit-demo" || model == "pixart-demo") && !std::filesystem::exists(model);
}

std::string demo_model_dir(const std::string& name) {
  if (name == "pixart-demo") return cache_dir("DIT_PIXART_DEMO_MODEL", "pixart-demo", "/tmp/dit-gen/pixart-demo");
  return cache_dir("DIT_DEMO_MODEL", "demo-model", "/tmp/dit-gen/demo-model");
}

std::string ensure_demo_model(const std::string& name) {
  namespace fs = std::filesystem;
  const std::string dir = demo_model_dir(name);
  if (fs::exists(fs::path(dir) / "model_index.json")) return dir;
  const bool pixart = name == "pixart-demo";
  std::fprintf(stderr, "dit-gen: %s; creating the demo model (%s, random weights: its images are noise) in %s\n",
               name.empty() ? "no --model given" : ("--model " + name).c_str(), pixart ? "PixArt-Σ" : "DiT",
               dir.c_str());
  MakeModelOptions mo;
  mo.preset = pixart ? "pixart-demo" : "demo";
  mo.out_dir = dir;
  try {
    make_model(mo);
  } catch (const Error&) {
    if (!fs::exists(fs::path(dir) / "model_index.json")) throw;  // another process made it meanwhile: fine
  }
  return dir;
}

std::string model_dir_of(const std::string& model) {
  if (model.empty()) return demo_model_dir();
  if (is_demo_name(model)) return demo_model_dir(model);
  return model;
}

}  // namespace dit::cli
