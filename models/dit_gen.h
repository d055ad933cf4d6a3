// dit-gen's public C++ API: load a diffusers DiT pipeline once, run many generations.
//
//   #include "models/dit_gen.h"
//
//   dit::PipelineOptions opt;
//   opt.model_dir = "/models/DiT-XL-2-256";          // model_index.json, transformer/, vae/, scheduler/
//   auto pipe = dit::Pipeline::load(opt);            // validates and maps the weights once
//
//   dit::Request req;
//   req.prompt = "golden retriever";                 // an ImageNet label, or a class id "207"
//   req.seed = 42;                                   // same seed -> same image as diffusers
//   dit::Result res = pipe->generate(req);           // res.image [1,3,256,256] in [0,1]
//   dit::save_png(res, "dog.png");                   // with the parameters embedded (iTXt)
//
// Parallel runs pass a StepExchange from dit::make_distributed_exchange (models/distributed_exchange.h);
// the default is one process.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/dit_weights.h"
#include "models/step_exchange.h"
#include "runtime/tensor.h"

namespace dit {

struct PipelineOptions {
  std::string model_dir;
  DType dtype = DType::F32;  // compute type of the transformer's matmuls (bf16 needs AVX-512 bf16 for speed)
  std::shared_ptr<StepExchange> exchange;  // null = serial
  // Q, K, V as one matmul over weights concatenated at load (Fused: a private copy per
  // process) or three over the checkpoint's weights in place (Split: shared by the processes
  // on a machine); Auto: Split when the weights are used in place (models/dit_weights.h).
  QkvProjection qkv = QkvProjection::Auto;
};

struct Request {
  std::string prompt;               // class label or id (class-conditional DiT)
  std::string negative_prompt;      // DiT: must be empty (the unconditional branch is the null class)
  uint64_t seed = 42;
  int steps = 50;
  double guidance_scale = 4.0;      // <= 1: no classifier-free guidance (one branch)
  std::string sampler;              // "" = the scheduler config's; ddim | dpm++2m | euler
  int width = 0, height = 0;        // pixels; 0 = the model's default
  bool decode = true;               // false: latents only
};

struct StepInfo {
  int step = 0, total = 0;          // 1-based step just finished
  double step_seconds = 0, elapsed_seconds = 0;
};
using ProgressFn = std::function<void(const StepInfo&)>;

struct Result {
  Tensor latents;     // [1, C, h, w] final latents before VAE scaling
  Tensor eps0;        // [1, C, h, w] guided noise prediction of the first step
  Tensor image;       // [1, 3, H, W] in [0, 1] (undefined when not decoded or not the output rank)
  int class_id = 0;
  std::string label;  // id2label entry of class_id
  std::string sampler;
  int width = 0, height = 0, steps = 0;
  double guidance_scale = 0;
  uint64_t seed = 0;
  double seconds = 0;           // whole generation
  double denoise_seconds = 0;   // the denoising loop only
  std::string parameters;       // AUTOMATIC1111-style text embedded in the PNG
};

struct ModelInfo {
  std::string dir, name;
  int default_width = 0, default_height = 0;
  int size_multiple = 0;         // width/height must be multiples of this (vae_scale · patch)
  int vae_scale = 8;
  int num_classes = 0;
  int heads = 0, hidden = 0, layers = 0;
  std::string default_sampler;   // from scheduler_config.json
};

class Pipeline {
 public:
  static std::unique_ptr<Pipeline> load(const PipelineOptions& opt);
  ~Pipeline();
  // Runs one generation; every rank of a parallel run calls it with the same request.
  Result generate(const Request& req, const ProgressFn& progress = {});
  // Denoises several requests together as one batch (a micro-batch); they must share size,
  // steps, sampler, decoding and whether guidance is on (seeds, classes and guidance scales
  // may differ). Each result equals what generate() gives for its request alone.
  std::vector<Result> generate_batch(const std::vector<Request>& reqs, const ProgressFn& progress = {});
  const ModelInfo& info() const;
  StepExchange& exchange();

 private:
  Pipeline();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes res.image as a PNG with res.parameters in an iTXt "parameters" chunk (atomically).
void save_png(const Result& res, const std::string& path);

}  // namespace dit
