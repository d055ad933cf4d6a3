#include "samplers/scheduler_config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "runtime/error.h"
#include "runtime/json_config.h"

namespace dit {
namespace {

constexpr unsigned kDDIM = 1, kDPM = 2, kEuler = 4, kAll = kDDIM | kDPM | kEuler;

struct ClassInfo {
  const char* class_name;
  const char* sampler_name;
  unsigned bit;
};
const ClassInfo kClasses[] = {
    {"DDIMScheduler", "ddim", kDDIM},
    {"DPMSolverMultistepScheduler", "dpm++2m", kDPM},
    {"EulerDiscreteScheduler", "euler", kEuler},
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

const ClassInfo* find_class(const std::string& name) {
  for (const auto& c : kClasses)
    if (name == c.class_name || name == c.sampler_name) return &c;
  return nullptr;
}

const ClassInfo& class_or_throw(const std::string& class_name) {
  const ClassInfo* c = find_class(class_name);
  DIT_CHECK(c, "scheduler class '" << class_name << "' is not supported (supported: "
                                   << join(scheduler_class_names()) << ")");
  return *c;
}

// ---- the key table: one row per diffusers __init__ argument this runtime knows ----

void read_value(const Config& c, const std::string& k, int64_t& v) { v = c.get_int(k, v); }
void read_value(const Config& c, const std::string& k, double& v) { v = c.get_double(k, v); }
void read_value(const Config& c, const std::string& k, bool& v) { v = c.get_bool(k, v); }
void read_value(const Config& c, const std::string& k, std::string& v) { v = c.get_string(k, v); }
void read_value(const Config& c, const std::string& k, std::vector<double>& v) {
  const nlohmann::json& j = c.json().at(k);
  DIT_CHECK(j.is_array(), c.source() << ": key '" << k << "': expected a list of numbers, found "
                                     << j.type_name());
  v.clear();
  for (const auto& e : j) {
    DIT_CHECK(e.is_number(), c.source() << ": key '" << k << "': expected a list of numbers, found a "
                                        << e.type_name() << " element");
    v.push_back(e.get<double>());
  }
}

struct KeyDef {
  const char* name;
  unsigned classes;  // which classes have this __init__ argument
  std::function<void(const Config&, SchedulerConfig&)> read;
  std::function<void(const SchedulerConfig&, SchedulerConfig&)> copy;
};

template <class T>
KeyDef key(const char* name, unsigned classes, T SchedulerConfig::*m) {
  return KeyDef{name, classes,
                [name, m](const Config& c, SchedulerConfig& sc) { read_value(c, name, sc.*m); },
                [m](const SchedulerConfig& from, SchedulerConfig& to) { to.*m = from.*m; }};
}

const std::vector<KeyDef>& key_table() {
  using S = SchedulerConfig;
  static const std::vector<KeyDef> t = {
      key("num_train_timesteps", kAll, &S::num_train_timesteps),
      key("beta_start", kAll, &S::beta_start),
      key("beta_end", kAll, &S::beta_end),
      key("beta_schedule", kAll, &S::beta_schedule),
      key("trained_betas", kAll, &S::trained_betas),
      key("prediction_type", kAll, &S::prediction_type),
      key("timestep_spacing", kAll, &S::timestep_spacing),
      key("steps_offset", kAll, &S::steps_offset),
      key("rescale_betas_zero_snr", kAll, &S::rescale_betas_zero_snr),
      key("thresholding", kDDIM | kDPM, &S::thresholding),
      key("set_alpha_to_one", kDDIM, &S::set_alpha_to_one),
      key("clip_sample", kDDIM, &S::clip_sample),
      key("clip_sample_range", kDDIM, &S::clip_sample_range),
      key("solver_order", kDPM, &S::solver_order),
      key("algorithm_type", kDPM, &S::algorithm_type),
      key("solver_type", kDPM, &S::solver_type),
      key("lower_order_final", kDPM, &S::lower_order_final),
      key("euler_at_final", kDPM, &S::euler_at_final),
      key("lambda_min_clipped", kDPM, &S::lambda_min_clipped),
      key("variance_type", kDPM, &S::variance_type),
      key("use_lu_lambdas", kDPM, &S::use_lu_lambdas),
      key("use_karras_sigmas", kDPM | kEuler, &S::use_karras_sigmas),
      key("use_exponential_sigmas", kDPM | kEuler, &S::use_exponential_sigmas),
      key("use_beta_sigmas", kDPM | kEuler, &S::use_beta_sigmas),
      key("final_sigmas_type", kDPM | kEuler, &S::final_sigmas_type),
      key("interpolation_type", kEuler, &S::interpolation_type),
      key("timestep_type", kEuler, &S::timestep_type),
  };
  return t;
}

void check_one_of(const char* what, const std::string& v, const std::vector<std::string>& ok,
                  const std::string& cls) {
  DIT_CHECK(std::find(ok.begin(), ok.end(), v) != ok.end(),
            cls << ": " << what << " '" << v << "' is not supported (supported: " << join(ok) << ")");
}

}  // namespace

const std::vector<std::string>& scheduler_class_names() {
  static const std::vector<std::string> v = {kClasses[0].class_name, kClasses[1].class_name,
                                             kClasses[2].class_name};
  return v;
}

const std::vector<std::string>& sampler_names() {
  static const std::vector<std::string> v = {kClasses[0].sampler_name, kClasses[1].sampler_name,
                                             kClasses[2].sampler_name};
  return v;
}

std::string sampler_name_for_class(const std::string& class_name) {
  return class_or_throw(class_name).sampler_name;
}

std::string class_for_sampler_name(const std::string& name) {
  const ClassInfo* c = find_class(name);
  DIT_CHECK(c, "unknown sampler '" << name << "' (supported: " << join(sampler_names()) << ")");
  return c->class_name;
}

SchedulerConfig scheduler_defaults(const std::string& class_name) {
  const ClassInfo& c = class_or_throw(class_name);
  SchedulerConfig sc;
  sc.class_name = c.class_name;
  switch (c.bit) {
    case kDDIM:
      sc.timestep_spacing = "leading";
      sc.clip_sample = true;
      break;
    case kDPM:
      sc.timestep_spacing = "linspace";
      break;
    case kEuler:
      sc.timestep_spacing = "linspace";
      break;
  }
  return sc;
}

SchedulerConfig scheduler_config_from(const Config& cfg) {
  std::string cls = cfg.get_string("_class_name", "DDIMScheduler");
  const ClassInfo* ci = find_class(cls);
  DIT_CHECK(ci && cls == ci->class_name,
            cfg.source() << ": _class_name '" << cls << "' is not a supported scheduler (supported: "
                         << join(scheduler_class_names()) << ")");
  SchedulerConfig sc = scheduler_defaults(cls);
  for (const KeyDef& k : key_table()) {
    if (!(k.classes & ci->bit) || !cfg.has(k.name) || cfg.is_null(k.name)) continue;
    k.read(cfg, sc);
    sc.mark_explicit(k.name);
  }
  try {
    validate_scheduler_config(sc);
  } catch (const Error& e) {
    throw e.with_context(cfg.source());
  }
  return sc;
}

SchedulerConfig with_sampler(const SchedulerConfig& base, const std::string& name) {
  const ClassInfo* target = find_class(name);
  DIT_CHECK(target, "unknown sampler '" << name << "' (supported: " << join(sampler_names())
                                        << " or " << join(scheduler_class_names()) << ")");
  if (base.class_name == target->class_name) return base;
  SchedulerConfig out = scheduler_defaults(target->class_name);
  for (const KeyDef& k : key_table()) {
    if (!(k.classes & target->bit) || !base.is_explicit(k.name)) continue;
    k.copy(base, out);
    out.mark_explicit(k.name);
  }
  return out;
}

void validate_scheduler_config(const SchedulerConfig& sc) {
  const ClassInfo& ci = class_or_throw(sc.class_name);
  const std::string& cls = sc.class_name;
  DIT_CHECK(sc.num_train_timesteps >= 1 && sc.num_train_timesteps <= kMaxTrainTimesteps,
            cls << ": num_train_timesteps must be in 1.." << kMaxTrainTimesteps << ", got " << sc.num_train_timesteps);
  // A beta is a variance fraction: NaN, infinite, negative or >= 1 betas used to run to
  // non-finite latents instead of naming the key.
  auto check_beta = [&](const char* key, double v) {
    DIT_CHECK(std::isfinite(v) && v >= 0 && v < 1, cls << ": key '" << key << "' must be in [0, 1), got " << v);
  };
  if (sc.trained_betas.empty()) {
    check_one_of("beta_schedule", sc.beta_schedule, {"linear", "scaled_linear", "squaredcos_cap_v2"}, cls);
    check_beta("beta_start", sc.beta_start);
    check_beta("beta_end", sc.beta_end);
  } else {
    DIT_CHECK(int64_t(sc.trained_betas.size()) == sc.num_train_timesteps,
              cls << ": trained_betas has " << sc.trained_betas.size() << " values, num_train_timesteps is "
                  << sc.num_train_timesteps);
    for (double b : sc.trained_betas) check_beta("trained_betas", b);
  }
  DIT_CHECK(sc.steps_offset >= 0 && sc.steps_offset < sc.num_train_timesteps,
            cls << ": key 'steps_offset' must be in 0.." << sc.num_train_timesteps - 1 << ", got " << sc.steps_offset);
  check_one_of("prediction_type", sc.prediction_type, {"epsilon", "v_prediction", "sample"}, cls);
  check_one_of("timestep_spacing", sc.timestep_spacing, {"leading", "linspace", "trailing"}, cls);
  DIT_CHECK(!sc.thresholding, cls << ": thresholding=true (dynamic thresholding) is not supported");
  DIT_CHECK(!sc.rescale_betas_zero_snr, cls << ": rescale_betas_zero_snr=true is not supported");
  if (ci.bit == kDDIM) {
    DIT_CHECK(sc.clip_sample_range > 0, cls << ": clip_sample_range must be > 0, got " << sc.clip_sample_range);
  }
  if (ci.bit & (kDPM | kEuler)) {
    DIT_CHECK(!sc.use_karras_sigmas, cls << ": use_karras_sigmas=true is not supported");
    DIT_CHECK(!sc.use_exponential_sigmas, cls << ": use_exponential_sigmas=true is not supported");
    DIT_CHECK(!sc.use_beta_sigmas, cls << ": use_beta_sigmas=true is not supported");
    check_one_of("final_sigmas_type", sc.final_sigmas_type, {"zero", "sigma_min"}, cls);
  }
  if (ci.bit == kDPM) {
    DIT_CHECK(sc.solver_order == 1 || sc.solver_order == 2,
              cls << ": solver_order " << sc.solver_order << " is not supported (supported: 1, 2)");
    check_one_of("algorithm_type", sc.algorithm_type, {"dpmsolver++"}, cls);
    check_one_of("solver_type", sc.solver_type, {"midpoint", "heun"}, cls);
    DIT_CHECK(!sc.use_lu_lambdas, cls << ": use_lu_lambdas=true is not supported");
    DIT_CHECK(!std::isnan(sc.lambda_min_clipped), cls << ": key 'lambda_min_clipped' is NaN");
    DIT_CHECK(sc.variance_type.empty(),
              cls << ": variance_type '" << sc.variance_type << "' is not supported (only null)");
  }
  if (ci.bit == kEuler) {
    check_one_of("interpolation_type", sc.interpolation_type, {"linear"}, cls);
    check_one_of("timestep_type", sc.timestep_type, {"discrete", "continuous"}, cls);
    DIT_CHECK(!(sc.timestep_type == "continuous" && sc.prediction_type == "v_prediction"),
              cls << ": timestep_type 'continuous' with v_prediction is not supported");
  }
}

}  // namespace dit
