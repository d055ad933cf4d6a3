#include "tools/cli/demo_model.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "models/make_model.h"
#include "runtime/error.h"

namespace dit::cli {

std::string demo_model_dir() {
  if (const char* d = std::getenv("DIT_DEMO_MODEL"); d && *d) return d;
  std::string base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    base = x;
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = std::string(h) + "/.cache";
  else
    base = "/tmp";
  return base + "/dit-gen/demo-model";
}

std::string ensure_demo_model() {
  namespace fs = std::filesystem;
  const std::string dir = demo_model_dir();
  if (fs::exists(fs::path(dir) / "model_index.json")) return dir;
  std::fprintf(stderr,
               "dit-gen: no --model given; creating the demo model (random weights: its images are noise) in %s\n",
               dir.c_str());
  MakeModelOptions mo;
  mo.preset = "demo";
  mo.out_dir = dir;
  try {
    make_model(mo);
  } catch (const Error&) {
    if (!fs::exists(fs::path(dir) / "model_index.json")) throw;  // another process made it meanwhile: fine
  }
  return dir;
}

}  // namespace dit::cli
