// dit-gen: text-to-image (PixArt) and class-conditional (DiT) image generation from a diffusers
// checkpoint directory, on one process or many (CFG parallel, Ulysses, Ring).
//
//   dit-gen -m pixart-demo -p "a red fox in the snow" -o fox.png   # the text-to-image demo model
//   dit-gen --prompt "golden retriever" -o dog.png                 # the DiT demo model
//   dit-gen -m /models/DiT-XL-2-256 -p "tabby cat" --steps 50 -s 7 -o cat.png
//   dit-gen -p 207 --cfg-parallel --ulysses 2 -o dog.png          # 4 processes
//   dit-gen --batch prompts.jsonl --output-dir out --dp 2          # many images, 2 replicas
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>

#include "models/model_index.h"
#include "parallel/launcher.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "tools/cli/batch.h"
#include "tools/cli/batch_relay.h"
#include "tools/cli/demo_model.h"
#include "tools/cli/options.h"
#include "tools/cli/session.h"
#include "tools/cli/single.h"
#include "tools/parse_args.h"

using namespace dit::cli;

int main(int argc, char** argv) {
  dit::remove_partial_files_on_signal();  // Ctrl-C mid-write leaves no temporary file
  GenOptions o;
  CLI::App app{"dit-gen: diffusion-transformer image generation from a diffusers checkpoint directory on CPUs, on one "
               "process or many: text-to-image PixArt-Σ/α (the prompt is text) and class-conditional DiT (the prompt "
               "is an ImageNet label or class id).\nDemo models with random weights (their images are noise), created "
               "on first use: -m pixart-demo, -m dit-demo (the default)."};
  add_generation_options(app, o);
  app.set_version_flag("--version", std::string("dit-gen ") + DIT_VERSION);
  if (auto rc = dit::parse_args(app, argc, argv, "dit-gen")) return *rc;  // errors: one line

  const dit::MeshDegrees degrees = o.degrees();
  const dit::LaunchOptions lo = launch_options(o, degrees.world());
  Session s;
  try {
    s.env = dit::detect_launch_env(lo);
    validate(o);
    if (o.batch.empty()) check_single_outputs(o);
    // The model directory and the layout are checked once here, before any worker starts.
    if (!s.env.external && (o.model.empty() || is_demo_name(o.model)))
      ensure_demo_model(o.model);  // the launcher, or a single process
    else
      dit::ModelIndex::load(model_dir_of(o.model));
    check_layout(o, model_dir_of(o.model),
                 s.env.external ? s.env.local_world
                                : (o.nproc_per_node > 0 ? o.nproc_per_node : degrees.world() / std::max(1, o.nnodes)));
    if (!s.env.external)
      if (auto rc = dit::maybe_launch(argc, argv, lo)) return *rc;
    open_session(o, degrees, s);
    const int rc = o.batch.empty() ? run_single(o, s) : run_batch(o, s);
    if (s.world) s.world->shutdown();
    return rc;
  } catch (const SameOnEveryRank& e) {
    if (s.env.local_rank == 0) std::fprintf(stderr, "dit-gen: error: %s\n", e.what());
    if (s.world) s.world->abort(e.what());
    return s.env.world > 1 ? dit::kInputErrorExit : 1;
  } catch (const std::exception& e) {
    // This rank stopped because another one failed: under our launcher, which reports the
    // cause once, it exits quietly (4 ranks used to print 5 lines for one killed rank).
    const bool casualty = (s.world && s.world->failed_because_of_peer()) || dynamic_cast<const BatchAbort*>(&e);
    if (casualty && s.env.supervised) {
      if (s.world) s.world->abort(e.what());
      return dit::kPeerFailedExit;
    }
    // On a terminal, clear a progress bar's line first; elsewhere the error is the only line.
    std::fprintf(stderr, "%sdit-gen: error: %s\n", ::isatty(STDERR_FILENO) ? "\r\033[K" : "", e.what());
    dit::fail_rank(s.world.get(), s.env, e.what());
    return 1;
  }
}
