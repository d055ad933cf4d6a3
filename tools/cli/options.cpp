#include "tools/cli/options.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <thread>

#include "models/model_index.h"
#include "parallel/distributed_context.h"
#include "parallel/parallel_attention.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/printable.h"
#include "runtime/progress.h"
#include "runtime/tensor.h"

namespace dit::cli {

void add_generation_options(CLI::App& app, GenOptions& o) {
  // An empty --model or --rendezvous used to mean "not given" (the demo model, a private rendezvous).
  const CLI::Validator non_empty([](std::string& v) { return v.empty() ? "is empty" : ""; }, "", "non-empty");
  app.add_option("-m,--model", o.model, "diffusers pipeline directory (model_index.json, transformer/, vae/, scheduler/; "
                                        "text_encoder/ and tokenizer/ for text-to-image models), or pixart-demo / dit-demo; default: the DiT demo model")
      ->check(non_empty);
  app.add_option("-p,--prompt", o.prompt,
                 "text-to-image models (PixArt): the text; class-conditional DiT: a class label (e.g. \"golden "
                 "retriever\") or class id");
  app.add_option("-n,--negative-prompt", o.negative_prompt,
                 "text-to-image models: the text of the unconditional branch (default \"\"); not for DiT");
  app.add_option_function<std::string>(
         "-s,--seed",
         [&o](const std::string& v) {
           try {
             o.seed = parse_seed(v, "--seed");
           } catch (const Error& e) {
             throw CLI::ValidationError(e.what());  // a parse error: reported like CLI11's own
           }
         },
         "random seed 0..2^64-1 (torch-compatible noise)")
      ->default_str("42");
  app.add_option_function<int>(
         "--steps", [&o](const int& v) { o.steps = v; }, "denoising steps (default: the model's: DiT 50, PixArt 20)")
      ->check(CLI::Range(1, 1000));
  app.add_option_function<double>(
      "-g,--guidance-scale,--cfg-scale", [&o](const double& v) { o.guidance = v; },
      "classifier-free guidance scale, <= 1: no guidance (default: the model's: DiT 4, PixArt 4.5)");
  app.add_option("--sampler", o.sampler, "ddim|dpm++2m|euler (default: the model's scheduler_config.json)");
  // Given explicitly, a size or length is >= 1 (0 used to mean "the model's").
  app.add_option("-W,--width", o.width, "image width in pixels (default: the model's sample_size x VAE scale)")
      ->check(CLI::PositiveNumber);
  app.add_option("-H,--height", o.height, "image height in pixels (default: the model's sample_size x VAE scale)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-sequence-length", o.max_sequence_length,
                 "text-to-image: prompt tokens, longer prompts are cut (default: the model's: PixArt-Σ 300, α 120)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no-resolution-binning", o.no_binning,
               "text-to-image: generate at the requested size instead of the nearest aspect-ratio bin");
  app.add_option("-o,--output", o.output, "output PNG (a name ending in .png)")->capture_default_str()->each([&o](const std::string&) {
    o.output_given = true;
  });
  app.add_option("--save-latents", o.save_latents, "also write the final latents (before VAE scaling) to FILE.npy");
  app.add_option("--save-noise-pred", o.save_noise_pred,
                 "also write the first step's guided noise prediction to FILE.npy (to compare layouts)");
  app.add_flag("--no-decode", o.no_decode, "skip the VAE decode and the PNG");
  app.add_option("--dtype", o.dtype, "matmul compute type: f32|bf16 (bf16 needs an AVX-512 CPU)")->capture_default_str();
  app.add_option("--vae-dtype", o.vae_dtype,
                 "the VAE decoder's convolution type: f32|bf16 (default: --dtype's; bf16 multiplies in bf16 and "
                 "accumulates in f32; with the weight cache on, 3x3 convolutions run by Winograd's algorithm: f32 "
                 "F(4x4, 3x3), and bf16 F(2x2, 3x3) on CPUs without AMX)");
  app.add_option("--weight-cache", o.weight_cache,
                 "weights stored in another type than --dtype (f16/bf16 checkpoints in f32, f32/f16 linear weights in "
                 "bf16) are converted once into this directory, and the blocks' linear weights packed once into the "
                 "matmul's layout (DIR/packed), and memory-mapped from there, shared by every rank of the machine; "
                 "'off': convert in each process's memory and read the weights as stored (default: "
                 "$DIT_WEIGHT_CACHE, else $XDG_CACHE_HOME/dit-gen/weights, else ~/.cache/dit-gen/weights)");
  app.add_option_function<int>(
      "-t,--threads", [&o](const int& v) { o.threads = v > 0 ? v : -1; },  // -1: given but not positive
      "threads per rank, 1..4096 (default: allowed cores / local ranks, at least 1)");
  app.add_option("--progress", o.progress, "auto|bar|json|none (auto: a bar on a terminal)")->capture_default_str();
  app.add_flag("-v,--verbose", o.verbose, "print model and timing details");
  const char* bat = "Batch (many prompts per model load; see README)";
  app.add_option("--batch", o.batch,
                 "JSON Lines or text file of prompts (- = standard input); with --output-dir. Keys left out take "
                 "the command line's values")
      ->group(bat);
  app.add_option("--output-dir", o.output_dir, "batch: directory for the PNGs and results.jsonl (created)")->group(bat);
  app.add_flag("--overwrite", o.overwrite, "batch: regenerate items whose output already exists (default: skip them)")
      ->group(bat);
  app.add_option("--micro-batch", o.micro_batch, "batch: denoise up to N items of the same size, steps and sampler together")
      ->capture_default_str()
      ->group(bat);
  app.add_option("--dp", o.dp, "batch: data-parallel replicas, each taking a share of the items")
      ->capture_default_str()
      ->group(bat);
  app.add_flag("--save-item-latents", o.item_latents, "batch: also write each item's final latents as <output>.npy")
      ->group(bat);
  const char* par = "Parallel (ranks are processes; started here unless launched externally, see README)";
  app.add_flag("--cfg-parallel", o.cfg_parallel, "run the cond and uncond branches on two rank groups")->group(par);
  app.add_option("--ulysses", o.ulysses, "Ulysses degree: split tokens across ranks, all-to-all over heads (at most the head count)")
      ->capture_default_str()
      ->group(par);
  app.add_option("--ring", o.ring, "Ring degree: split tokens across ranks, K/V passed round a ring")
      ->capture_default_str()
      ->group(par);
  app.add_option("--tensor-parallel,--tp", o.tp,
                 "tensor-parallel degree: split the transformer's heads and MLP columns (and the text encoder) over "
                 "ranks; combines with --cfg-parallel, --dp, --ulysses and --ring (heads/tp >= ulysses)")
      ->capture_default_str()
      ->group(par);
  app.add_option("--sp-min-tokens", o.sp_min_tokens,
                 "tensor parallel: split the residual stream by tokens (Megatron sequence parallelism) from this many "
                 "tokens x batch per rank group (default: 512)")
      ->group(par);
  app.add_option("--ulysses-chunks", o.ulysses_chunks,
                 "Ulysses: pipeline each rank's heads in up to this many chunks, so the all-to-all of one chunk "
                 "travels while another is computed (1: no overlap; default: " +
                     std::to_string(kDefaultUlyssesChunks) + " when the ranks span machines, 1 on one machine)")
      ->group(par);
  app.add_option("--transport", o.transport, kTransportHelp)
      ->check(CLI::IsMember({"auto", "tcp"}))
      ->capture_default_str()
      ->group(par);
  app.add_option("--share-rows,--share-ffn", o.share_rows,
                 "the blocks' feed-forward and, under sequence parallelism (--ulysses, --ring), their Q, K, V projection (together 11/12 of their linear work): on = their token rows are shared among the replica's ranks on one machine, so a rank that has finished its own rows computes some of a slower rank's (the same bits; a warning where it cannot: ranks on several machines, tensor parallelism); off = each rank its own rows; auto = on where the ranks have at most 4 threads each (one slow core slows a "
                 "rank of few threads), else off. --share-ffn is the older name")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str()
      ->group(par);
  app.add_option("--vae-parallel", o.vae_parallel,
                 "who decodes a replica's image: machines = the first rank of each machine decodes a band of its rows "
                 "with that machine's cores (on one machine: the output rank with all of them); ranks = every rank a "
                 "band on its own cores (each holds the decoder); off = the output rank alone, with its machine's cores")
      ->capture_default_str()
      ->group(par);
  app.add_flag("--no-pin", o.no_pin,
               "do not pin the ranks: by default local rank r of a machine runs on its own cores (r*threads .. "
               "r*threads+threads-1 of the allowed set; -v prints them)")
      ->group(par);
  app.add_option("--timeout", o.timeout,
                 "seconds any collective may wait before the run fails (the ranks waiting for another's VAE decode "
                 "wait as long as it takes: a lost rank is named by the heartbeats)")
      ->capture_default_str()
      ->group(par);
  app.add_option("--rendezvous", o.rendezvous,
                 "file:DIR or redis://HOST:PORT[/RUN] (default: a private temporary directory on this machine)")
      ->check(non_empty)
      ->group(par);
  app.add_option("--nnodes", o.nnodes, "machines taking part (with --rendezvous redis://... or a shared file:DIR)")
      ->capture_default_str()
      ->group(par);
  app.add_option("--node-rank", o.node_rank, "index of this machine")->capture_default_str()->group(par);
  app.add_option_function<int>(
         "--nproc-per-node", [&o](const int& v) { o.nproc_per_node = v > 0 ? v : -1; },
         "ranks started on this machine (default: world / nnodes)")
      ->group(par);
}

Request GenOptions::request() const {
  Request r;
  r.prompt = prompt;
  r.negative_prompt = negative_prompt;
  r.seed = seed;
  r.steps = steps;
  r.guidance_scale = guidance;
  r.sampler = sampler;
  r.width = width;
  r.height = height;
  r.max_sequence_length = max_sequence_length;
  r.resolution_binning = !no_binning;
  r.decode = !no_decode;
  return r;
}

void check_extension(const std::string& path, const char* flag, const OutputKind& kind) {
  const std::string ext = std::filesystem::path(path).extension().string();
  const bool same = ext.size() == std::strlen(kind.extension) &&
                    std::equal(ext.begin(), ext.end(), kind.extension,
                               [](char a, char b) { return std::tolower((unsigned char)a) == b; });
  DIT_CHECK(same, flag << ": '" << printable(path, 200) << "' does not end in " << kind.extension << " ("
                       << kind.what << " is written there)");
}

void check_output_path(const std::string& path, const char* flag, const OutputKind* kind) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  DIT_CHECK(!path.empty() && p.has_filename(), flag << ": '" << path << "' is not a file path");
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  DIT_CHECK(fs::is_directory(parent), flag << ": directory '" << parent.string() << "' does not exist");
  DIT_CHECK(::access(parent.c_str(), W_OK) == 0, flag << ": directory '" << parent.string() << "' is not writable");
  DIT_CHECK(!fs::is_directory(p), flag << ": '" << path << "' is a directory");
  if (kind) check_extension(path, flag, *kind);
}

void check_single_outputs(const GenOptions& o) {
  if (!o.no_decode) check_output_path(o.output, "--output", &kPngOutput);
  if (!o.save_latents.empty()) check_output_path(o.save_latents, "--save-latents", &kNpyOutput);
  if (!o.save_noise_pred.empty()) check_output_path(o.save_noise_pred, "--save-noise-pred", &kNpyOutput);
  // The extensions keep -o apart from the two arrays; the arrays could still be one file.
  if (!o.save_latents.empty() && !o.save_noise_pred.empty()) {
    std::error_code ec;
    const auto a = std::filesystem::weakly_canonical(o.save_latents, ec);
    const auto b = std::filesystem::weakly_canonical(o.save_noise_pred, ec);
    DIT_CHECK(ec || a != b, "--save-latents and --save-noise-pred name the same file '" << printable(o.save_latents, 200)
                                                                                        << "' (one would overwrite the other)");
  }
}

uint64_t parse_seed(const std::string& v, const char* what) {
  const bool digits = !v.empty() && v.size() <= 20 && v.find_first_not_of("0123456789") == std::string::npos;
  DIT_CHECK(digits && (v.size() < 20 || v <= "18446744073709551615"),
            what << ": '" << printable(v, 40) << "' is not a seed (an integer 0.." << UINT64_MAX << ")");
  return std::stoull(v);
}

void validate(const GenOptions& o) {
  parse_progress_mode(o.progress);
  parse_compute_type("--dtype", o.dtype);
  if (!o.vae_dtype.empty()) parse_compute_type("--vae-dtype", o.vae_dtype);
  parse_vae_parallel(o.vae_parallel);
  DIT_CHECK(o.ulysses >= 1 && o.ring >= 1 && o.ulysses <= 1024 && o.ring <= 1024,
            "--ulysses and --ring must be in 1..1024");
  DIT_CHECK(o.threads >= 0 && o.threads <= 4096, "-t/--threads must be in 1..4096");
  DIT_CHECK(o.tp >= 1 && o.tp <= 1024, "--tensor-parallel must be in 1..1024");
  DIT_CHECK(o.sp_min_tokens >= 0, "--sp-min-tokens must be >= 0");
  DIT_CHECK(o.ulysses_chunks >= 0 && o.ulysses_chunks <= 64, "--ulysses-chunks must be in 1..64 (0: the default)");
  DIT_CHECK(o.nproc_per_node >= 0 && o.nproc_per_node <= 4096, "--nproc-per-node must be in 1..4096");
  DIT_CHECK(o.nnodes >= 1 && o.nnodes <= 4096, "--nnodes must be in 1..4096");
  DIT_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes,
            "--node-rank " << o.node_rank << " is not a machine of --nnodes " << o.nnodes << " (0.." << o.nnodes - 1 << ")");
  DIT_CHECK(o.dp >= 1 && o.dp <= 1024, "--dp must be in 1..1024");
  DIT_CHECK(o.micro_batch >= 1 && o.micro_batch <= 256, "--micro-batch must be in 1..256");
  if (o.batch.empty()) {
    // Checked before any rank starts (the model's kind is not known yet).
    DIT_CHECK(!o.prompt.empty(), "--prompt is required (the text for PixArt, a class label or id for DiT; or --batch FILE)");
    DIT_CHECK(o.output_dir.empty() && !o.overwrite && !o.item_latents,
              "--output-dir, --overwrite and --save-item-latents are for batch mode (--batch FILE)");
    DIT_CHECK(o.dp == 1 && o.micro_batch == 1, "--dp and --micro-batch are for batch mode (--batch FILE)");
    DIT_CHECK(!o.no_decode || !o.output_given,
              "-o/--output: no image is written with --no-decode (--save-latents FILE.npy writes the latents)");
  } else {
    DIT_CHECK(!o.output_dir.empty(), "--batch needs --output-dir DIR");
    DIT_CHECK(!o.output_given, "-o/--output is for one image; a batch writes into --output-dir (or per-item \"output\")");
    DIT_CHECK(o.save_latents.empty() && o.save_noise_pred.empty(),
              "--save-latents/--save-noise-pred are for one image; use --save-item-latents with --batch");
    DIT_CHECK(!o.no_decode, "--no-decode is not supported with --batch (resuming needs the PNGs)");
    DIT_CHECK(o.batch == "-" || std::filesystem::is_regular_file(o.batch),
              "--batch: '" << o.batch << "' is not a readable file");
    DIT_CHECK(!std::filesystem::exists(o.output_dir) || std::filesystem::is_directory(o.output_dir),
              "--output-dir: '" << o.output_dir << "' is not a directory");
  }
  DIT_CHECK(o.degrees().world() <= 1024, "--dp × cfg × --ring × --ulysses × --tp is too large (" << o.degrees().world() << " ranks)");
  DIT_CHECK(o.timeout > 0 && o.timeout <= 86400, "--timeout must be in (0, 86400] seconds");
  DIT_CHECK(!o.cfg_parallel || !o.guidance || *o.guidance > 1.0 || !o.batch.empty(),  // batch: checked per item
            "--cfg-parallel needs classifier-free guidance, but --guidance-scale is " << *o.guidance
                                                                                      << " (<= 1 runs one branch only)");
}

void check_layout(const GenOptions& o, const std::string& model_dir, int local_ranks) {
  const int heads = peek_attention_heads(model_dir);
  DIT_CHECK(o.tp <= heads, "--tensor-parallel " << o.tp << ": the model has " << heads
                                                << " attention heads, so the tensor-parallel degree can be at most "
                                                << heads);
  const int per_tp = heads / o.tp;  // the fewest heads a tensor-parallel rank holds
  DIT_CHECK(o.ulysses <= per_tp, "--ulysses " << o.ulysses << ": the model has " << heads << " attention heads"
                                              << (o.tp > 1 ? ", at least " + std::to_string(per_tp) +
                                                                 " per tensor-parallel rank"
                                                           : std::string())
                                              << ", so the Ulysses degree can be at most " << per_tp
                                              << " (use --ring for more ranks)");
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  DIT_CHECK(local_ranks <= std::max(64, 4 * cores),
            local_ranks << " ranks on this machine are too many for its " << cores
                        << " cores (at most " << std::max(64, 4 * cores)
                        << "): lower --ulysses/--ring/--dp, or spread the ranks over machines (--nnodes)");
}

}  // namespace dit::cli
