// dit-gen's public C++ API: load a diffusers diffusion-transformer pipeline once, run many
// generations. Class-conditional DiT (DiTPipeline) and text-to-image models share it.
//
//   #include "models/dit_gen.h"
//
//   dit::PipelineOptions opt;
//   opt.model_dir = "/models/DiT-XL-2-256";          // model_index.json, transformer/, vae/, scheduler/, ...
//   auto pipe = dit::Pipeline::load(opt);            // validates and maps the weights once
//
//   dit::Request req;
//   req.prompt = "golden retriever";                 // DiT: an ImageNet label or class id; text models: text
//   req.seed = 42;                                   // same seed -> same image as diffusers
//   dit::Result res = pipe->generate(req);           // res.image [1,3,256,256] in [0,1]
//   dit::save_png(res, "dog.png");                   // with the parameters embedded (iTXt)
//
// Parallel runs pass a ParallelContext from dit::make_distributed_context (parallel/
// distributed_context.h); the default is one process. Which family a directory is, and the
// rules that differ between families, are in models/model_family.h.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/common/qkv.h"
#include "models/diffusion_model.h"
#include "runtime/parallel_context.h"
#include "runtime/tensor.h"
#include "runtime/weight_cache.h"

namespace dit {

struct PipelineOptions {
  std::string model_dir;
  DType dtype = DType::F32;  // compute type of the matmuls (bf16 needs AVX-512 bf16 for speed)
  std::optional<DType> vae_dtype;  // the VAE decoder's convolutions; unset: dtype's
  std::shared_ptr<ParallelContext> parallel;  // null = serial
  QkvProjection qkv = QkvProjection::Auto;    // models/common/qkv.h
  // Text-to-image: give back the text encoder's memory-mapped pages after each encoding, so a
  // single image does not keep T5 resident through the denoising loop. Batch mode keeps them.
  bool release_text_encoder = true;
  // Half-precision checkpoints computed in f32: their float32 copy comes from (and goes to) this
  // cache, mapped and shared by the machine's ranks (runtime/weight_cache.h). Default: off.
  WeightCacheOption weight_cache;
};

struct Request {
  std::string prompt;              // DiT: a class label or id; text-to-image: the text
  std::string negative_prompt;     // text-to-image: the unconditional branch's text ("" as diffusers); DiT: ""
  uint64_t seed = 42;
  std::optional<int> steps;        // unset: the model's default (DiT 50, PixArt 20)
  std::optional<double> guidance_scale;  // unset: the model's default (DiT 4.0, PixArt 4.5); <= 1: no guidance
  std::string sampler;             // "" = the scheduler config's; ddim | dpm++2m | euler
  int width = 0, height = 0;       // pixels; 0 = the model's default
  bool resolution_binning = true;  // text-to-image models with aspect-ratio bins: generate at the nearest bin
  int max_sequence_length = 0;     // text-to-image: prompt tokens; 0 = the model's default (Σ 300, α 120)
  bool decode = true;              // false: latents only
  bool keep_first_noise_pred = false;  // fill Result::first_noise_pred (--save-noise-pred)
};

// A request checked against the model, every default filled in. Pipeline::resolve makes it;
// generation, the PNG parameters, resume and batch validation all use the same one.
struct ResolvedRequest {
  Request req;
  int width = 0, height = 0;          // the output image
  int gen_width = 0, gen_height = 0;  // the generation size (the aspect-ratio bin's when binning)
  int steps = 0;
  double guidance = 0;
  bool cfg = false;                   // guidance > 1: both branches
  std::string sampler;                // resolved name
  int max_sequence_length = 0;        // text models
  PromptInfo prompt, negative;
};

struct StepInfo {
  int step = 0, total = 0;          // 1-based step just finished
  double step_seconds = 0, elapsed_seconds = 0;
};
using ProgressFn = std::function<void(const StepInfo&)>;

struct Result {
  ResolvedRequest request;
  Tensor latents;     // [1, C, h, w] final latents before VAE scaling, at the generation size
  Tensor image;       // [1, 3, H, W] in [0, 1] at the requested size (undefined when not decoded or not the output rank)
  Tensor first_noise_pred;  // [1, C, h, w] guided noise prediction of step 1 (Request::keep_first_noise_pred)
  double seconds = 0;             // whole generation
  double encode_seconds = 0;      // prompts -> conditioning (the text encoder), per item
  double denoise_seconds = 0;     // the denoising loop only, per item
  double first_step_seconds = 0;  // of the loop: step 1 (first-touch of weights, caches)
  double decode_seconds = 0;      // VAE decode (and, on first use of a size, its preparation)
  std::string parameters;       // AUTOMATIC1111-style text embedded in the PNG (format_parameters)
};

struct ModelInfo {
  std::string dir, name;
  std::string family;            // "DiT", "PixArt-Σ", "PixArt-α"
  bool text_to_image = false;    // prompts are text (else class labels)
  int default_width = 0, default_height = 0;
  int size_multiple = 0;         // width/height must be multiples of this (vae_scale · patch)
  int vae_scale = 8;
  int num_classes = 0;           // class-conditional models
  int default_steps = 0;
  double default_guidance = 0;
  int default_max_sequence_length = 0;  // text-to-image models
  bool resolution_binning = false;      // the model has aspect-ratio bins
  bool cond_first = true;               // guidance batch order: [cond, uncond] (DiT) or [uncond, cond] (PixArt)
  int heads = 0, hidden = 0, layers = 0;
  int64_t text_vocab = 0;        // text-to-image: the text encoder's vocabulary
  std::string default_sampler;   // from scheduler_config.json
};

class Pipeline {
 public:
  static std::unique_ptr<Pipeline> load(const PipelineOptions& opt);
  ~Pipeline();
  // Checks a request against the model and fills in its defaults; throws dit::Error with one
  // line naming what is wrong. Deterministic: every rank gets the same answer.
  ResolvedRequest resolve(const Request& req) const;
  // The AUTOMATIC1111-style text a generation of `r` embeds in its PNG: the prompt, a
  // "Negative prompt:" line for text models, then "Steps: ..., Version: dit-gen X".
  std::string parameters(const ResolvedRequest& r) const;
  // Runs one generation; every rank of a parallel run calls it with the same request.
  Result generate(const Request& req, const ProgressFn& progress = {});
  // Denoises several requests together as one batch (a micro-batch); they must share
  // generation size, steps, sampler, decoding, text length and whether guidance is on
  // (batch_key equal). Each result equals what generate() gives for its request alone.
  std::vector<Result> generate_batch(const std::vector<Request>& reqs, const ProgressFn& progress = {});
  const ModelInfo& info() const;
  // The VAE decoder's convolution type (PipelineOptions::vae_dtype, or its default) and
  // whether its 3×3 convolutions run by Winograd's algorithm (models/vae/vae_decoder.h).
  DType vae_dtype() const;
  bool vae_winograd() const;
  ParallelContext& parallel();
  // The whole transformer's FLOPs per step at the last generation's shape, every rank of the
  // replica together (benchmarks).
  ModelFlops flops() const;

 private:
  Pipeline();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What requests of one micro-batch must share (Pipeline::generate_batch).
std::string batch_key(const ResolvedRequest& r);

// What the pipeline sets up for (buffers, primitives, the VAE decoder): generation size, text
// length and guidance on/off. Consecutive requests with equal keys reuse that set-up; a
// change of key prepares again (a batch orders its work by this key).
std::string shape_key(const ResolvedRequest& r);

// Whether two parameters texts describe the same image: equal up to their ", Version: " field.
bool same_parameters(const std::string& a, const std::string& b);

// Writes res.image as a PNG with res.parameters in an iTXt "parameters" chunk (atomically).
void save_png(const Result& res, const std::string& path);

}  // namespace dit
