// Sampler: the per-request state of a diffusers scheduler (DDIM, DPM-Solver++ 2M, Euler).
// The arithmetic mirrors diffusers / the PyTorch reference (float32 where they use
// float32 tensors, float64 where they use numpy), so a trajectory matches PyTorch's to
// float rounding.
//
//   auto s = make_sampler(sc);
//   s->set_timesteps(steps);
//   s->prepare(x.numel());                  // state buffers (DPM); step() never allocates
//   x *= s->init_noise_sigma();             // 1 for DDIM/DPM
//   for (int i = 0; i < s->num_steps(); ++i) {
//     s->scale_model_input(x, xin, n, i);   // identity except Euler
//     eps = model(xin, s->timesteps()[i]);  // guided
//     s->step(i, eps, x, n);                // x <- x_{i+1}
//   }
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "samplers/scheduler_config.h"

namespace dit {

class Sampler {
 public:
  explicit Sampler(const SchedulerConfig& sc);
  virtual ~Sampler() = default;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // "ddim", "dpm++2m", "euler".
  virtual std::string name() const = 0;

  // Chooses the n inference timesteps (and sigmas) and resets the state.
  virtual void set_timesteps(int n) = 0;
  // Allocates the state buffers for latents of n_elems floats (DPM's previous x0).
  // Must be called before step() for samplers that keep state; cheap to call again.
  virtual void prepare(int64_t n_elems) { prepared_elems_ = n_elems; }

  // What the model gets as t at each step: integers stored as double for DDIM and DPM,
  // float32 values for Euler.
  const std::vector<double>& timesteps() const { return timesteps_; }
  int num_steps() const { return int(timesteps_.size()); }
  // Noise levels: num_steps()+1 values (the last one the final sigma) for DPM and Euler,
  // float32 values stored as double; empty for DDIM.
  const std::vector<double>& sigmas() const { return sigmas_; }

  // Initial latents = randn * init_noise_sigma().
  virtual float init_noise_sigma() const { return 1.0f; }
  // y = the model input for step `step` (x and y may be the same buffer).
  virtual void scale_model_input(const float* x, float* y, int64_t n, int step) const;
  // One update: x (n floats, in place) from x_i to x_{i+1}, with eps the (guided) model
  // output for x_i. Steps must be taken in order 0, 1, ... after set_timesteps.
  virtual void step(int i, const float* eps, float* x, int64_t n) = 0;

  const SchedulerConfig& config() const { return sc_; }
  const std::vector<float>& alphas_cumprod() const { return alphas_cumprod_; }

 protected:
  void check_step(int i) const;  // throws unless 0 <= i < num_steps()

  SchedulerConfig sc_;
  std::vector<float> alphas_cumprod_;
  std::vector<double> timesteps_;
  std::vector<double> sigmas_;
  int64_t prepared_elems_ = -1;
};

// Validates `sc` and builds the sampler of its class (DDIMScheduler -> "ddim",
// DPMSolverMultistepScheduler -> "dpm++2m", EulerDiscreteScheduler -> "euler").
std::unique_ptr<Sampler> make_sampler(const SchedulerConfig& sc);

// betas as diffusers computes them, float32 ("linear": torch.linspace in float32,
// bit-exact with torch 1.13's AVX2 kernel; "scaled_linear": linspace(√b0, √b1)²;
// "squaredcos_cap_v2": betas_for_alpha_bar in float64 cast to float32; trained_betas).
std::vector<float> betas(const SchedulerConfig& sc);
// cumprod(1 - betas) as torch.cumprod on the CPU computes it: float32 values, the running
// product accumulated in double.
std::vector<float> alphas_cumprod(const SchedulerConfig& sc);

// ---- helpers shared by the samplers (numpy / torch semantics) ----
namespace sampler_detail {
// torch.linspace(start, end, steps, dtype=float32) on the CPU, bit-exact.
std::vector<float> torch_linspace_f32(double start, double end, int64_t steps);
// np.linspace(start, stop, num) (float64, endpoint=True).
std::vector<double> np_linspace(double start, double stop, int64_t num);
// np.arange(start, stop, step) (float64).
std::vector<double> np_arange(double start, double stop, double step);
// np.round (half to even).
double np_round(double v);
// np.interp(x, arange(fp.size()), fp).
double np_interp_index(double x, const std::vector<double>& fp);
}  // namespace sampler_detail

}  // namespace dit
