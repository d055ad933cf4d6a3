// dit-gen: class-conditional DiT image generation from a diffusers checkpoint directory.
//
//   dit-gen --prompt "golden retriever" -o dog.png                 # the bundled demo model
//   dit-gen -m /models/DiT-XL-2-256 -p "tabby cat" --steps 50 -s 7 -o cat.png
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "models/dit_gen.h"
#include "models/make_model.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/npy.h"
#include "runtime/progress.h"
#include "samplers/scheduler_config.h"

namespace {

struct Options {
  std::string model;
  std::string prompt;
  std::string negative_prompt;
  uint64_t seed = 42;
  int steps = 50;
  double guidance = 4.0;
  std::string sampler;
  int width = 0, height = 0;
  std::string output = "output.png";
  std::string save_latents;
  bool no_decode = false;
  std::string dtype = "f32";
  int threads = 0;
  std::string progress = "auto";
  bool verbose = false;
};

// Where the demo model lives: $DIT_DEMO_MODEL, else $XDG_CACHE_HOME/dit-gen/demo-model,
// else ~/.cache/dit-gen/demo-model.
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
  std::fprintf(stderr, "dit-gen: no --model given; creating the demo model (random weights: its images are noise) in %s\n",
               dir.c_str());
  dit::MakeModelOptions mo;
  mo.preset = "demo";
  mo.out_dir = dir;
  try {
    dit::make_model(mo);
  } catch (const dit::Error&) {
    if (!fs::exists(fs::path(dir) / "model_index.json")) throw;  // another process made it meanwhile: fine
  }
  return dir;
}

void check_output_path(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  DIT_CHECK(!path.empty() && p.has_filename(), flag << ": '" << path << "' is not a file path");
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  DIT_CHECK(fs::is_directory(parent), flag << ": directory '" << parent.string() << "' does not exist");
  DIT_CHECK(::access(parent.c_str(), W_OK) == 0, flag << ": directory '" << parent.string() << "' is not writable");
  DIT_CHECK(!fs::is_directory(p), flag << ": '" << path << "' is a directory");
}

int run(const Options& o) {
  const dit::ProgressMode pmode = dit::parse_progress_mode(o.progress);
  if (!o.no_decode) check_output_path(o.output, "--output");
  if (!o.save_latents.empty()) check_output_path(o.save_latents, "--save-latents");
  if (o.threads > 0) dit::set_num_threads(o.threads);

  dit::PipelineOptions po;
  po.model_dir = o.model.empty() ? ensure_demo_model() : o.model;
  po.dtype = dit::parse_dtype(o.dtype);
  auto pipe = dit::Pipeline::load(po);
  const dit::ModelInfo& info = pipe->info();
  if (o.verbose)
    std::fprintf(stderr, "dit-gen: model %s: DiT %d layers, hidden %d, %d heads, %d classes, VAE scale %d, %d threads\n",
                 info.dir.c_str(), info.layers, info.hidden, info.heads, info.num_classes, info.vae_scale,
                 dit::num_threads());

  dit::Request req;
  req.prompt = o.prompt;
  req.negative_prompt = o.negative_prompt;
  req.seed = o.seed;
  req.steps = o.steps;
  req.guidance_scale = o.guidance;
  req.sampler = o.sampler;
  req.width = o.width;
  req.height = o.height;
  req.decode = !o.no_decode;

  dit::Progress progress(pmode);
  dit::Result res = pipe->generate(req, [&](const dit::StepInfo& s) {
    progress.step(s.step, s.total, s.step_seconds, s.elapsed_seconds);
  });
  progress.finish();

  if (!o.save_latents.empty()) dit::write_npy(o.save_latents, res.latents);
  if (!o.no_decode) dit::save_png(res, o.output);
  std::fprintf(stderr, "dit-gen: class %d (%s), %dx%d, %d %s steps, guidance %g, seed %llu: %.2f s (%.3f s/step)%s%s\n",
               res.class_id, res.label.c_str(), res.width, res.height, res.steps, res.sampler.c_str(),
               res.guidance_scale, (unsigned long long)res.seed, res.seconds, res.denoise_seconds / res.steps,
               o.no_decode ? "" : " -> ", o.no_decode ? "" : o.output.c_str());
  if (pmode == dit::ProgressMode::Json)
    progress.event("done", "\"output\":" + dit::json_quote(o.no_decode ? "" : o.output) +
                               ",\"seconds\":" + std::to_string(res.seconds));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"dit-gen: class-conditional DiT image generation (diffusers checkpoint layout) on CPUs.\n"
               "Without --model it uses the bundled demo model (random weights: its images are noise), created on "
               "first use in $DIT_DEMO_MODEL or ~/.cache/dit-gen/demo-model."};
  app.add_option("-m,--model", o.model, "diffusers DiT pipeline directory (model_index.json, transformer/, vae/, "
                                        "scheduler/); default: the demo model");
  app.add_option("-p,--prompt", o.prompt, "class label (e.g. \"golden retriever\") or class id")->required();
  app.add_option("-n,--negative-prompt", o.negative_prompt, "not supported by class-conditional DiT (must be empty)");
  app.add_option("-s,--seed", o.seed, "random seed (torch-compatible noise)")->capture_default_str();
  app.add_option("--steps", o.steps, "denoising steps")->capture_default_str()->check(CLI::Range(1, 1000));
  app.add_option("-g,--guidance-scale,--cfg-scale", o.guidance, "classifier-free guidance scale (<= 1: no guidance)")
      ->capture_default_str();
  app.add_option("--sampler", o.sampler, "ddim|dpm++2m|euler (default: the model's scheduler_config.json)");
  app.add_option("-W,--width", o.width, "image width in pixels (default: the model's sample_size x VAE scale)");
  app.add_option("-H,--height", o.height, "image height in pixels (default: the model's sample_size x VAE scale)");
  app.add_option("-o,--output", o.output, "output PNG")->capture_default_str();
  app.add_option("--save-latents", o.save_latents, "also write the final latents (before VAE scaling) as .npy");
  app.add_flag("--no-decode", o.no_decode, "skip the VAE decode and the PNG");
  app.add_option("--dtype", o.dtype, "matmul compute type: f32|bf16")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "threads (default: all cores)")->capture_default_str();
  app.add_option("--progress", o.progress, "auto|bar|json|none (auto: a bar on a terminal)")->capture_default_str();
  app.add_flag("-v,--verbose", o.verbose, "print model and timing details");
  app.set_version_flag("--version", std::string("dit-gen ") + DIT_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ndit-gen: error: %s\n", e.what());
    return 1;
  }
}
