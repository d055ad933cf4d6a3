#include "tools/cli/demo_model.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "models/make_model.h"
#include "runtime/environment.h"
#include "runtime/error.h"

namespace dit::cli {

namespace {

// $var, else the user's cache directory for `what`, else /tmp/dit-gen/<what>.
std::string demo_dir(const char* var, const std::string& what) {
  if (const char* v = env_nonempty(var)) return v;
  const std::string d = user_cache_dir(what);
  return d.empty() ? "/tmp/dit-gen/" + what : d;
}

}  // namespace

bool is_demo_name(const std::string& model) {
  return (model == "dit-demo" || model == "pixart-demo") && !std::filesystem::exists(model);
}

std::string demo_model_dir(const std::string& name) {
  if (name == "pixart-demo") return demo_dir("DIT_PIXART_DEMO_MODEL", "pixart-demo");
  return demo_dir("DIT_DEMO_MODEL", "demo-model");
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
