// The seam between the denoising loop (models/pipeline.cpp) and a model family
// (models/<family>/, registered in models/registry.cpp). A family gives the pipeline
//  - a DiffusionModel: the transformer that predicts noise from latents, a timestep and a
//    Conditioning (DiT, PixArt, later SD3/Flux), and
//  - a Conditioner: turns prompts into that Conditioning (class labels for DiT; a tokenizer
//    and text encoder for PixArt),
// plus a few plain-data rules (models/model_family.h). The pipeline owns them with the VAE
// and the sampler. Like stable-diffusion.cpp's one DiffusionModel/Conditioner seam for every
// family, the loop never names a family.
//
//   model.prepare(shape, ctx);               // once per shape: primitives, buffers, attention objects
//   conditioner.encode(rows, L, cond);       // once per request: prompts -> Conditioning
//   model.begin(cond);                       // once per request: what depends only on the conditioning
//   for each step: model.forward(x, t, out); // allocation-free
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/parallel_context.h"
#include "runtime/tensor.h"

namespace dit {

// What the model is conditioned on: one entry per row of the model batch.
struct Conditioning {
  int64_t batch = 0;
  std::vector<int64_t> class_ids;  // class-conditional: [batch] (the null class for unconditional rows)
  Tensor text;                     // text-to-image: encoder states [batch, L, C]
  Tensor text_mask;                // [batch, L] f32: 1 a token, 0 padding
  int image_height = 0, image_width = 0;  // pixels of the generated image (size micro-conditions)
  // The timesteps forward() will be called with, in order (the sampler's; empty: unknown). A
  // model may compute ahead what depends on them and the conditioning alone; forward() gives
  // the same result for a timestep outside it.
  std::vector<double> schedule;
};

// The patch geometry and size of a transformer, as the pipeline needs it.
struct ModelGeometry {
  int in_channels = 4;    // latent channels
  int out_channels = 8;   // 2·in_channels with learned sigma (the pipeline keeps the first in_channels)
  int patch = 2;
  int sample_size = 32;   // latent size the model was trained at (default image = sample_size × VAE scale)
  int heads = 0, hidden = 0, layers = 0;
  int patch_row_out() const { return out_channels * patch * patch; }
};

struct ModelShape {
  int64_t batch = 1;
  int64_t latent_h = 0, latent_w = 0;
  int64_t text_tokens = 0;  // length of the conditioning text (0: none)
  int64_t tokens(int patch) const { return (latent_h / patch) * (latent_w / patch); }
};

// FLOPs of one forward at the prepared batch over the whole token sequence (every sequence-
// parallel rank's share together): matmuls 2·m·k·n, attention 4·B·Nq·Nk·D; norms and
// element-wise work not counted.
struct ModelFlops {
  double linear = 0;           // token matmuls (patch embedding, projections, MLPs, output)
  double attention = 0;        // self-attention
  double cross_attention = 0;  // attention to the text tokens
  double conditioning = 0;     // timestep embedding and modulation (per step)
  double per_request = 0;      // work done once per request in begin() (e.g. the caption's K/V)
  double per_step() const { return linear + attention + cross_attention + conditioning; }
};

class DiffusionModel {
 public:
  virtual ~DiffusionModel() = default;
  virtual const ModelGeometry& geometry() const = 0;
  // Creates every primitive and buffer for this shape and asks ctx.layers() for its attention
  // objects; computes the tokens ctx.sequence().range(N) of this rank. ctx must outlive the
  // forward calls.
  virtual void prepare(const ModelShape& shape, ParallelContext& ctx) = 0;
  // Once per request (or micro-batch), before its steps: takes the conditioning (rows in
  // batch order) and computes what depends on it alone.
  virtual void begin(const Conditioning& cond) = 0;
  // latents [batch, C, h, w] (the full latents: every rank holds them), t [batch] timesteps
  // -> out [batch, local_tokens, patch·patch·out_channels]. Allocates nothing.
  virtual void forward(const float* latents, const double* t, float* out) = 0;
  // FLOPs at the prepared shape (benchmarks; Pipeline::flops adds the other guidance half).
  virtual ModelFlops flops() const = 0;
};

// A prompt as the family understood it, in family-neutral terms (the Result, the PNG
// parameters and results.jsonl carry it).
struct PromptInfo {
  bool class_conditional = false;
  int class_id = -1;       // class-conditional: the class (and its id2label entry)
  std::string label;
  int tokens = 0;          // text: tokens used (with </s>) and whether the prompt was cut
  bool truncated = false;
};

// One row of the conditioning batch: a prompt's conditional row, or the unconditional row
// of guidance (the negative prompt for text models, the null class for DiT).
struct CondRow {
  std::string prompt;
  bool unconditional = false;
};

class Conditioner {
 public:
  virtual ~Conditioner() = default;
  // Checks a prompt and says what it resolves to; throws dit::Error (one line) when it cannot
  // be used (unknown class label, invalid UTF-8, ...). Deterministic: every rank agrees.
  virtual PromptInfo resolve(const std::string& prompt, bool negative, int max_length) const = 0;
  // Fills cond.class_ids or cond.text / text_mask for `rows` (in batch order).
  virtual void encode(const std::vector<CondRow>& rows, int max_length, Conditioning& cond) = 0;
};

}  // namespace dit
