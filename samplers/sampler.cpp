#include "samplers/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "runtime/error.h"

namespace dit {

std::unique_ptr<Sampler> make_ddim_sampler(const SchedulerConfig& sc);    // ddim.cpp
std::unique_ptr<Sampler> make_dpm_sampler(const SchedulerConfig& sc);     // dpm_solver.cpp
std::unique_ptr<Sampler> make_euler_sampler(const SchedulerConfig& sc);   // euler.cpp

namespace sampler_detail {

std::vector<float> torch_linspace_f32(double start_d, double end_d, int64_t steps) {
  DIT_CHECK(steps >= 0, "linspace: steps must be >= 0, got " << steps);
  std::vector<float> out(static_cast<size_t>(steps), 0.0f);
  if (steps == 0) return out;
  const float start = float(start_d), end = float(end_d);
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  // aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp (torch 1.13, AVX2 build, as shipped
  // by Debian): step in float; the first half counts up from start, the second half down
  // from end; the vectorised loop (8 floats, two vectors per iteration) computes the first
  // element of each vector as one fused multiply-add (the kernel is compiled with FMA
  // contraction) and the other 7 as base + k*step; the tail is scalar, fused as well.
  const float step = (end - start) / float(steps - 1);
  const int64_t halfway = steps / 2;
  auto base_at = [&](int64_t idx) -> float {
    return idx < halfway ? std::fma(step, float(idx), start) : std::fma(-step, float(steps - idx - 1), end);
  };
  constexpr int64_t W = 8;
  const int64_t nvec = (steps / (2 * W)) * (2 * W);
  int64_t idx = 0;
  for (; idx < nvec; idx += W) {
    const float base = base_at(idx);
    for (int64_t k = 0; k < W; ++k) {
      out[size_t(idx + k)] = base + float(k) * step;  // not fused (built with -ffp-contract=off)
    }
  }
  for (; idx < steps; ++idx) out[size_t(idx)] = base_at(idx);
  return out;
}

std::vector<double> np_linspace(double start, double stop, int64_t num) {
  DIT_CHECK(num >= 0, "linspace: num must be >= 0, got " << num);
  std::vector<double> y(static_cast<size_t>(num));
  if (num == 0) return y;
  const int64_t div = num - 1;
  const double delta = stop - start;
  if (div == 0) {
    y[0] = 0.0 * delta + start;
    return y;
  }
  const double step = delta / double(div);
  for (int64_t i = 0; i < num; ++i) {
    y[size_t(i)] = ((step == 0.0) ? double(i) / double(div) * delta : double(i) * step) + start;
  }
  y[size_t(num - 1)] = stop;
  return y;
}

std::vector<double> np_arange(double start, double stop, double step) {
  DIT_CHECK(step != 0.0, "arange: step must not be 0");
  const double len_d = std::ceil((stop - start) / step);
  const int64_t len = len_d > 0 ? int64_t(len_d) : 0;
  std::vector<double> y(static_cast<size_t>(len));
  if (len == 0) return y;
  y[0] = start;
  if (len > 1) y[1] = start + step;
  // numpy's DOUBLE_fill: delta = buffer[1] - buffer[0]; buffer[i] = start + i*delta.
  const double delta = (len > 1) ? y[1] - start : step;
  for (int64_t i = 2; i < len; ++i) {
    y[size_t(i)] = start + double(i) * delta;
  }
  return y;
}

double np_round(double v) { return std::nearbyint(v); }  // default rounding: half to even

double np_interp_index(double x, const std::vector<double>& fp) {
  const int64_t n = int64_t(fp.size());
  DIT_CHECK(n > 0, "interp: empty table");
  if (std::isnan(x)) return x;
  if (x < 0.0) return fp[0];
  if (x > double(n - 1)) return fp[size_t(n - 1)];
  int64_t j = int64_t(std::floor(x));  // xp = 0, 1, ..., n-1: xp[j] <= x < xp[j+1]
  if (j >= n - 1) return fp[size_t(n - 1)];
  if (double(j) == x) return fp[size_t(j)];
  const double slope = (fp[size_t(j + 1)] - fp[size_t(j)]) / (double(j + 1) - double(j));
  double r = slope * (x - double(j)) + fp[size_t(j)];
  if (std::isnan(r)) {
    r = slope * (x - double(j + 1)) + fp[size_t(j + 1)];
    if (std::isnan(r) && fp[size_t(j)] == fp[size_t(j + 1)]) r = fp[size_t(j)];
  }
  return r;
}

}  // namespace sampler_detail

std::vector<float> betas(const SchedulerConfig& sc) {
  const int64_t T = sc.num_train_timesteps;
  DIT_CHECK(T >= 1 && T <= kMaxTrainTimesteps, "num_train_timesteps must be in 1.." << kMaxTrainTimesteps << ", got " << T);
  if (!sc.trained_betas.empty()) {
    DIT_CHECK(int64_t(sc.trained_betas.size()) == T,
              "trained_betas has " << sc.trained_betas.size() << " values, num_train_timesteps is " << T);
    return std::vector<float>(sc.trained_betas.begin(), sc.trained_betas.end());
  }
  if (sc.beta_schedule == "linear") return sampler_detail::torch_linspace_f32(sc.beta_start, sc.beta_end, T);
  if (sc.beta_schedule == "scaled_linear") {
    std::vector<float> b = sampler_detail::torch_linspace_f32(std::sqrt(sc.beta_start), std::sqrt(sc.beta_end), T);
    for (float& v : b) v = v * v;
    return b;
  }
  if (sc.beta_schedule == "squaredcos_cap_v2") {
    // diffusers betas_for_alpha_bar(T, max_beta=0.999, "cosine"), in Python floats.
    const double pi = 3.141592653589793;
    auto alpha_bar = [pi](double t) { return std::pow(std::cos((t + 0.008) / 1.008 * pi / 2), 2.0); };
    std::vector<float> b(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) {
      const double t1 = double(i) / double(T), t2 = double(i + 1) / double(T);
      b[size_t(i)] = float(std::min(1 - alpha_bar(t2) / alpha_bar(t1), 0.999));
    }
    return b;
  }
  DIT_FAIL("beta_schedule '" << sc.beta_schedule
                             << "' is not supported (supported: linear, scaled_linear, squaredcos_cap_v2)");
}

std::vector<float> alphas_cumprod(const SchedulerConfig& sc) {
  std::vector<float> b = betas(sc);
  std::vector<float> ac(b.size());
  double acc = 1.0;  // torch's CPU cumprod accumulates float in double
  for (size_t i = 0; i < b.size(); ++i) {
    const float alpha = 1.0f - b[i];
    acc *= double(alpha);
    ac[i] = float(acc);
  }
  return ac;
}

Sampler::Sampler(const SchedulerConfig& sc) : sc_(sc), alphas_cumprod_(dit::alphas_cumprod(sc)) {}

void Sampler::scale_model_input(const float* x, float* y, int64_t n, int step) const {
  check_step(step);
  if (x != y) std::memcpy(y, x, size_t(n) * sizeof(float));
}

void Sampler::check_step(int i) const {
  DIT_CHECK(!timesteps_.empty(), name() << ": set_timesteps() was not called");
  DIT_CHECK(i >= 0 && i < num_steps(), name() << ": step " << i << " out of range [0, " << num_steps() << ")");
}

std::unique_ptr<Sampler> make_sampler(const SchedulerConfig& sc) {
  validate_scheduler_config(sc);
  using Factory = std::unique_ptr<Sampler> (*)(const SchedulerConfig&);
  static const struct {
    const char* class_name;
    Factory make;
  } table[] = {
      {"DDIMScheduler", &make_ddim_sampler},
      {"DPMSolverMultistepScheduler", &make_dpm_sampler},
      {"EulerDiscreteScheduler", &make_euler_sampler},
  };
  for (const auto& row : table)
    if (sc.class_name == row.class_name) return row.make(sc);
  DIT_FAIL("scheduler class '" << sc.class_name << "' is not supported");  // validate() said so already
}

}  // namespace dit
