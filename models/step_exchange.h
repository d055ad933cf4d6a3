// How the pieces of one denoising step meet when a generation is spread over ranks.
// The pipeline asks it which tokens and which guidance branch this rank computes, and
// hands it the partial results to combine; the serial implementation does nothing.
// (The distributed implementation, over parallel/'s process groups, is in
// models/distributed_exchange.h.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/self_attention.h"

namespace dit {

struct TokenRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

class StepExchange {
 public:
  virtual ~StepExchange() = default;
  // Tokens of a `tokens`-long sequence computed by this rank (contiguous; all of them when serial).
  virtual TokenRange token_range(int64_t tokens) const = 0;
  // The attention implementation matching the sequence split.
  virtual std::unique_ptr<SelfAttention> make_attention() = 0;
  // Called once per shape before the loop (buffers, registered memory).
  virtual void prepare(int64_t batch, int64_t tokens, int64_t row, int64_t latent_elems) = 0;
  // local [batch, range.size(), row] -> full [batch, tokens, row] on every rank of the sequence group.
  virtual void gather_tokens(const float* local, float* full) = 0;
  // Guidance branch computed here: -1 = both ([cond, uncond] as one batch of 2), 0 = cond, 1 = uncond.
  virtual int cfg_branch() const = 0;
  // With a CFG split: this rank's noise prediction [latent_elems] -> both [2, latent_elems] ([cond, uncond]).
  virtual void exchange_cfg(const float* mine, float* both) = 0;
  // Whether this rank decodes and writes the output.
  virtual bool is_output_rank() const = 0;
  // Makes every rank agree that the step's result is identical (cheap checksum); throws if not.
  virtual void check_agreement(const float* latents, int64_t n) = 0;
  // One line describing the layout ("serial", "cfg2 × ulysses2 × ring1: rank 3 ...").
  virtual std::string describe(int64_t tokens, int heads) const = 0;
};

std::unique_ptr<StepExchange> make_serial_exchange();

}  // namespace dit
