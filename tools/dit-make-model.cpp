// dit-make-model: writes a diffusers-layout DiT pipeline directory with random weights.
//
//   dit-make-model --preset demo --out models/demo
//   dit-make-model --preset xl --layers 4 --out /tmp/xl4 --dtype bf16 --shards 3
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "models/make_model.h"
#include "runtime/error.h"
#include "runtime/tensor.h"
#include "tools/parse_args.h"

int main(int argc, char** argv) {
  CLI::App app{"Writes a complete diffusers-layout pipeline directory with random weights, in the real layout.\n"
               "DiT (model_index.json, transformer/, vae/, scheduler/): tiny (tests), small, demo (DiT-S/2-like, "
               "256x256), xl (DiT-XL/2 dimensions).\nPixArt-Σ (also text_encoder/ with T5 and tokenizer/): pixart-demo "
               "(256x256, small transformer and T5), pixart-xl (PixArt-Σ-XL-2-1024-MS with T5-XXL)."};
  dit::MakeModelOptions opt;
  std::string dtype = "f32";
  std::string presets;
  for (const std::string& p : dit::model_presets()) presets += (presets.empty() ? "" : "|") + p;
  app.add_option("--preset", opt.preset, "model preset: " + presets)->capture_default_str();
  app.add_option("--out", opt.out_dir, "output directory (must not exist, or be empty)")->required();
  app.add_option("--seed", opt.seed, "random seed of the weights")
      ->capture_default_str()
      ->check(CLI::Validator(  // CLI11 takes "-1" as 2^64-1
          [](std::string& v) {
            return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos
                       ? std::string()
                       : "'" + v + "' is not a seed (an integer 0..2^64-1)";
          },
          "", "seed"));
  app.add_option("--dtype", dtype, "stored weight type: f32|bf16")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  app.add_option("--shards", opt.shards, "split the transformer into this many safetensors shards")->capture_default_str();
  app.add_option("--layers", opt.layers, "transformer depth (0 = the preset's)")->capture_default_str();
  app.add_option("--text-layers", opt.text_layers, "text-encoder depth of PixArt presets (0 = the preset's)")
      ->capture_default_str();
  app.add_option("--text-shards", opt.text_shards, "split the text encoder into this many safetensors shards")
      ->capture_default_str();
  app.set_version_flag("--version", std::string("dit-make-model ") + DIT_VERSION);
  if (auto rc = dit::parse_args(app, argc, argv, "dit-make-model")) return *rc;
  try {
    opt.dtype = dit::parse_dtype(dtype);
    dit::make_model(opt);
    std::fprintf(stderr, "dit-make-model: wrote the '%s' preset to %s\n", opt.preset.c_str(), opt.out_dir.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dit-make-model: error: %s\n", e.what());
    return 1;
  }
}
