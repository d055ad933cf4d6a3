// SchedulerConfig: the settings of a diffusers scheduler (DDIMScheduler,
// DPMSolverMultistepScheduler, EulerDiscreteScheduler) as a plain struct, with the
// constructor defaults of each class, and the rules diffusers uses to read
// scheduler_config.json and to switch class (`OtherScheduler.from_config(config)`).
//
//   SchedulerConfig sc = scheduler_config_from(Config::load(dir + "/scheduler/scheduler_config.json"));
//   sc = with_sampler(sc, "dpm++2m");          // like DPMSolverMultistepScheduler.from_config
//   auto sampler = make_sampler(sc);           // samplers/sampler.h
//
// The core math (samplers/*.cpp) only sees this struct; the JSON side is
// scheduler_config_from() alone.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace dit {

class Config;

struct SchedulerConfig {
  // "DDIMScheduler" | "DPMSolverMultistepScheduler" | "EulerDiscreteScheduler".
  std::string class_name = "DDIMScheduler";

  // Shared by all three classes.
  int64_t num_train_timesteps = 1000;
  double beta_start = 0.0001;
  double beta_end = 0.02;
  std::string beta_schedule = "linear";  // "linear" | "scaled_linear" | "squaredcos_cap_v2"
  std::vector<double> trained_betas;     // empty: none (the file's null)
  std::string prediction_type = "epsilon";  // "epsilon" | "v_prediction" | "sample"
  std::string timestep_spacing = "leading";  // "leading" | "linspace" | "trailing"
  int64_t steps_offset = 0;
  bool thresholding = false;             // true is rejected (dynamic thresholding unsupported)
  bool rescale_betas_zero_snr = false;   // true is rejected

  // DDIMScheduler.
  bool set_alpha_to_one = true;
  bool clip_sample = true;               // class default TRUE (DiT's file says false)
  double clip_sample_range = 1.0;

  // DPMSolverMultistepScheduler.
  int64_t solver_order = 2;              // 1 or 2 (3 rejected)
  std::string algorithm_type = "dpmsolver++";  // only "dpmsolver++"
  std::string solver_type = "midpoint";  // "midpoint" | "heun"
  bool lower_order_final = true;
  bool euler_at_final = false;
  double lambda_min_clipped = -std::numeric_limits<double>::infinity();
  std::string variance_type;             // "" (null) only
  bool use_karras_sigmas = false;        // DPM and Euler: true is rejected
  bool use_exponential_sigmas = false;   // rejected when true
  bool use_beta_sigmas = false;          // rejected when true
  bool use_lu_lambdas = false;           // DPM: rejected when true

  // DPM and Euler.
  std::string final_sigmas_type = "zero";  // "zero" | "sigma_min"

  // EulerDiscreteScheduler.
  std::string interpolation_type = "linear";  // only "linear"
  std::string timestep_type = "discrete";     // "discrete" | "continuous" (ignored unless v_prediction)

  // Keys that were given explicitly (read from a file, or set by the caller and recorded
  // with mark_explicit). with_sampler() carries only these over to another class; every
  // other key takes the new class's default, as in diffusers' from_config.
  std::set<std::string> explicit_keys;
  bool is_explicit(const std::string& key) const { return explicit_keys.count(key) != 0; }
  void mark_explicit(const std::string& key) { explicit_keys.insert(key); }
};

// The supported diffusers classes, in a fixed order.
const std::vector<std::string>& scheduler_class_names();
// The user-facing sampler names and their classes: "ddim" -> DDIMScheduler,
// "dpm++2m" -> DPMSolverMultistepScheduler, "euler" -> EulerDiscreteScheduler.
const std::vector<std::string>& sampler_names();
std::string sampler_name_for_class(const std::string& class_name);  // throws if unknown
std::string class_for_sampler_name(const std::string& name);        // throws if unknown

// The constructor defaults of `class_name` (no explicit keys). Throws dit::Error listing
// the supported classes for any other name.
SchedulerConfig scheduler_defaults(const std::string& class_name);

// Reads a diffusers scheduler_config.json: `_class_name` picks the class (missing: DDIM),
// every key that is absent or null takes that class's default, unknown keys and keys
// starting with '_' are ignored. Throws dit::Error (naming the file and key) for an
// unknown class, a value of the wrong type, or a setting this runtime does not implement.
SchedulerConfig scheduler_config_from(const Config& cfg);

// Switches to another class the way diffusers' `Other.from_config(base)` does: keys
// explicitly present in `base` that the new class also has carry over (beta schedule,
// prediction_type, timestep_spacing, steps_offset, ...); the others take the new class's
// defaults (e.g. a DiT file without "timestep_spacing" gives DPM "linspace").
// `name` is a sampler name ("ddim", "dpm++2m", "euler") or a class name. Same class: base.
SchedulerConfig with_sampler(const SchedulerConfig& base, const std::string& name);

// The largest num_train_timesteps accepted (diffusers' models use 1000): the schedules are
// tables of that many values, and a hostile file must not make them gigabytes.
constexpr int64_t kMaxTrainTimesteps = 100000;

// Throws dit::Error for settings outside what the samplers implement (karras sigmas,
// thresholding, solver_order 3, other algorithm types, unknown spacings, ...).
void validate_scheduler_config(const SchedulerConfig& sc);

}  // namespace dit
