// dit-gen's command-line options, shared by single-image and batch mode.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "models/dit_gen.h"
#include "parallel/mesh.h"

namespace dit::cli {

struct GenOptions {
  std::string model;
  std::string prompt;
  std::string negative_prompt;
  uint64_t seed = 42;
  std::optional<int> steps;         // unset: the model's default
  std::optional<double> guidance;   // unset: the model's default
  std::string sampler;
  int width = 0, height = 0;
  int max_sequence_length = 0;      // text-to-image: 0 = the model's default
  bool no_binning = false;          // --no-resolution-binning
  std::string output = "output.png";
  bool output_given = false;  // -o was on the command line
  std::string save_latents;
  std::string save_noise_pred;
  bool no_decode = false;
  std::string dtype = "f32";
  std::string vae_dtype;  // "": --dtype's
  int threads = 0;
  std::string progress = "auto";
  bool verbose = false;
  // Parallel layout.
  bool cfg_parallel = false;
  int ulysses = 1, ring = 1, tp = 1;
  int64_t sp_min_tokens = 0;  // 0: the default (parallel/distributed_context.h)
  int ulysses_chunks = 0;     // 0: the default (parallel/parallel_attention.h)
  bool no_pin = false;  // --no-pin: leave the ranks' CPU affinity alone
  std::string share_rows = "auto";  // --share-rows auto|on|off (parallel/shared_rows.h)
  std::string vae_parallel = "machines";  // --vae-parallel machines|ranks|off (parallel/distributed_context.h)
  std::string weight_cache;  // --weight-cache: "" = the default location, "off", or a directory
  double timeout = 300;
  std::string transport = "auto";  // --transport auto|tcp (parallel/process_group.h)
  std::string rendezvous;
  int nnodes = 1, node_rank = 0, nproc_per_node = 0;
  // Batch mode (tools/cli/batch.h).
  std::string batch;       // --batch FILE ("-": standard input)
  std::string output_dir;  // --output-dir
  bool overwrite = false;
  bool item_latents = false;  // --save-item-latents: <output>.npy next to each PNG
  int dp = 1;              // data-parallel replicas
  int micro_batch = 1;

  MeshDegrees degrees() const { return {dp, cfg_parallel ? 2 : 1, ring, ulysses, tp}; }
  // The request the flags describe (prompt and generation settings; batch lines start from it).
  Request request() const;
};

// Registers every option (with its default shown in --help) on `app`.
void add_generation_options(CLI::App& app, GenOptions& o);

// Checks that need no model, done before any rank starts so a bad flag gives one error.
void validate(const GenOptions& o);

// Checks the parallel layout against the model (Ulysses degree <= attention heads) and this
// machine (`local_ranks` ranks started here), before any rank starts.
void check_layout(const GenOptions& o, const std::string& model_dir, int local_ranks);

// A seed as the user wrote it: 0..2^64-1, digits only ("-1" and "2^64" are refused, not wrapped).
uint64_t parse_seed(const std::string& v, const char* what);

// What a tool writes at a path, for the name's check: its extension and its kind in words.
struct OutputKind {
  const char* extension;  // ".png"
  const char* what;       // "a PNG image"
};
inline constexpr OutputKind kPngOutput{".png", "a PNG image"};
inline constexpr OutputKind kNpyOutput{".npy", "a NumPy .npy array"};

// flag: '<path>' must be a writable file path in an existing directory; with a `kind`, its
// name must end in the kind's extension.
void check_output_path(const std::string& path, const char* flag, const OutputKind* kind = nullptr);

// One image's files (-o unless --no-decode, --save-latents, --save-noise-pred): each a
// writable path with its extension, and no two the same file.
void check_single_outputs(const GenOptions& o);

// flag: '<path>' must end in kind.extension, in any case ("x.jpg" given to -o would get PNG bytes).
void check_extension(const std::string& path, const char* flag, const OutputKind& kind);

}  // namespace dit::cli
