// scheduler_config.json parsing, class defaults, with_sampler switching, error messages.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "runtime/error.h"
#include "runtime/json_config.h"
#include "samplers/sampler.h"
#include "samplers/scheduler_config.h"

using Catch::Matchers::Contains;

namespace {
dit::SchedulerConfig parse(const std::string& text) {
  return dit::scheduler_config_from(dit::Config::parse(text, "scheduler_config.json"));
}
const char* kPixArt = R"({ "_class_name": "DPMSolverMultistepScheduler", "_diffusers_version": "0.22.0.dev0",
  "algorithm_type": "dpmsolver++", "beta_end": 0.02, "beta_schedule": "linear",
  "beta_start": 0.0001, "dynamic_thresholding_ratio": 0.995, "euler_at_final": false,
  "lambda_min_clipped": -Infinity, "lower_order_final": true, "num_train_timesteps": 1000,
  "prediction_type": "epsilon", "sample_max_value": 1.0, "solver_order": 2,
  "solver_type": "midpoint", "steps_offset": 0, "thresholding": false,
  "timestep_spacing": "linspace", "trained_betas": null, "use_karras_sigmas": false,
  "use_lu_lambdas": false, "variance_type": null })";
}  // namespace

TEST_CASE("DiT scheduler_config.json", "[samplers]") {
  dit::SchedulerConfig sc = dit::scheduler_config_from(
      dit::Config::load(std::string(DIT_TEST_DATA) + "/dit-tiny/scheduler/scheduler_config.json"));
  CHECK(sc.class_name == "DDIMScheduler");
  CHECK(sc.num_train_timesteps == 1000);
  CHECK(sc.beta_start == 0.0001);
  CHECK(sc.beta_end == 0.02);
  CHECK(sc.beta_schedule == "linear");
  CHECK(sc.trained_betas.empty());
  CHECK(sc.clip_sample == false);  // from the file (class default is true)
  CHECK(sc.set_alpha_to_one == true);
  CHECK(sc.steps_offset == 0);
  CHECK(sc.prediction_type == "epsilon");
  CHECK(sc.timestep_spacing == "leading");  // absent -> DDIM default
  CHECK_FALSE(sc.is_explicit("timestep_spacing"));
  CHECK(sc.is_explicit("clip_sample"));
  CHECK_FALSE(sc.is_explicit("trained_betas"));  // null
  auto s = dit::make_sampler(sc);
  CHECK(s->name() == "ddim");
  s->set_timesteps(4);
  CHECK(s->timesteps() == std::vector<double>{750, 500, 250, 0});
}

TEST_CASE("class defaults", "[samplers]") {
  CHECK(dit::scheduler_defaults("DDIMScheduler").clip_sample == true);
  CHECK(dit::scheduler_defaults("DDIMScheduler").timestep_spacing == "leading");
  CHECK(dit::scheduler_defaults("DPMSolverMultistepScheduler").timestep_spacing == "linspace");
  CHECK(dit::scheduler_defaults("EulerDiscreteScheduler").timestep_spacing == "linspace");
  auto d = parse(R"({"_class_name": "DDIMScheduler"})");
  CHECK(d.clip_sample == true);
  CHECK(d.clip_sample_range == 1.0);
  auto p = parse(R"({"_class_name": "DPMSolverMultistepScheduler"})");
  CHECK(p.solver_order == 2);
  CHECK(p.algorithm_type == "dpmsolver++");
  CHECK(p.solver_type == "midpoint");
  CHECK(p.lower_order_final);
  CHECK(p.final_sigmas_type == "zero");
  CHECK(std::isinf(p.lambda_min_clipped));
  CHECK(p.lambda_min_clipped < 0);
  CHECK(parse("{}").class_name == "DDIMScheduler");  // no _class_name: DDIM
}

TEST_CASE("PixArt DPM config with -Infinity", "[samplers]") {
  dit::SchedulerConfig sc = parse(kPixArt);
  CHECK(sc.class_name == "DPMSolverMultistepScheduler");
  CHECK(std::isinf(sc.lambda_min_clipped));
  CHECK(sc.lambda_min_clipped < 0);
  CHECK(sc.timestep_spacing == "linspace");
  CHECK(sc.variance_type.empty());
  auto s = dit::make_sampler(sc);
  CHECK(s->name() == "dpm++2m");
  s->set_timesteps(20);
  CHECK(s->timesteps().front() == 999);
  CHECK(s->timesteps().back() == 50);
}

TEST_CASE("config errors", "[samplers]") {
  CHECK_THROWS_WITH(parse(R"({"_class_name": "PNDMScheduler"})"),
                    Contains("PNDMScheduler") && Contains("DDIMScheduler") &&
                        Contains("DPMSolverMultistepScheduler") && Contains("EulerDiscreteScheduler"));
  CHECK_THROWS_WITH(parse(R"({"_class_name": "DPMSolverMultistepScheduler", "use_karras_sigmas": true})"),
                    Contains("use_karras_sigmas") && Contains("not supported"));
  CHECK_THROWS_WITH(parse(R"({"_class_name": "EulerDiscreteScheduler", "use_karras_sigmas": true})"),
                    Contains("use_karras_sigmas") && Contains("not supported"));
  CHECK_THROWS_WITH(parse(R"({"_class_name": "DDIMScheduler", "thresholding": true})"), Contains("thresholding"));
  CHECK_THROWS_WITH(parse(R"({"_class_name": "DPMSolverMultistepScheduler", "algorithm_type": "sde-dpmsolver++"})"),
                    Contains("algorithm_type") && Contains("sde-dpmsolver++"));
  CHECK_THROWS_WITH(parse(R"({"_class_name": "DPMSolverMultistepScheduler", "solver_order": 3})"),
                    Contains("solver_order 3"));
  CHECK_THROWS_WITH(parse(R"({"beta_schedule": "sigmoid"})"), Contains("beta_schedule") && Contains("sigmoid"));
  CHECK_THROWS_WITH(parse(R"({"prediction_type": "flow"})"), Contains("prediction_type"));
  CHECK_THROWS_WITH(parse(R"({"timestep_spacing": "karras"})"), Contains("timestep_spacing"));
  CHECK_THROWS_WITH(parse(R"({"clip_sample": "no"})"), Contains("clip_sample"));
  CHECK_THROWS_WITH(parse(R"({"trained_betas": [0.1, 0.2]})"), Contains("trained_betas"));
  // the file name is in the message
  CHECK_THROWS_WITH(parse(R"({"_class_name": "DDIMScheduler", "thresholding": true})"),
                    Contains("scheduler_config.json"));
  // keys of other classes are ignored, as diffusers does
  CHECK_NOTHROW(parse(R"({"_class_name": "DDIMScheduler", "use_karras_sigmas": true, "solver_order": 3})"));
}

TEST_CASE("with_sampler switches class like from_config", "[samplers]") {
  dit::SchedulerConfig dit_sc = dit::scheduler_config_from(
      dit::Config::load(std::string(DIT_TEST_DATA) + "/dit-tiny/scheduler/scheduler_config.json"));
  SECTION("DiT DDIM -> DPM: timestep_spacing absent -> linspace") {
    auto sc = dit::with_sampler(dit_sc, "dpm++2m");
    CHECK(sc.class_name == "DPMSolverMultistepScheduler");
    CHECK(sc.timestep_spacing == "linspace");
    CHECK(sc.beta_schedule == "linear");
    CHECK(sc.solver_order == 2);
    CHECK(sc.is_explicit("beta_schedule"));
    CHECK_FALSE(sc.is_explicit("clip_sample"));  // not a DPM key
    auto s = dit::make_sampler(sc);
    s->set_timesteps(20);
    CHECK(s->timesteps().front() == 999);
  }
  SECTION("DiT DDIM -> Euler, and back to DDIM") {
    auto e = dit::with_sampler(dit_sc, "euler");
    CHECK(e.class_name == "EulerDiscreteScheduler");
    CHECK(e.timestep_spacing == "linspace");
    auto back = dit::with_sampler(e, "ddim");
    CHECK(back.timestep_spacing == "leading");
    CHECK(back.clip_sample == true);  // DiT's clip_sample=false was lost in the Euler hop, as in diffusers
  }
  SECTION("explicit keys carry over") {
    auto sc = parse(R"({"_class_name": "DDIMScheduler", "timestep_spacing": "trailing", "steps_offset": 1,
                        "beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012,
                        "prediction_type": "v_prediction", "clip_sample": false})");
    auto d = dit::with_sampler(sc, "DPMSolverMultistepScheduler");
    CHECK(d.timestep_spacing == "trailing");
    CHECK(d.steps_offset == 1);
    CHECK(d.beta_schedule == "scaled_linear");
    CHECK(d.beta_start == 0.00085);
    CHECK(d.prediction_type == "v_prediction");
  }
  SECTION("same class and unknown names") {
    CHECK(dit::with_sampler(dit_sc, "ddim").clip_sample == false);
    CHECK_THROWS_WITH(dit::with_sampler(dit_sc, "heun"), Contains("heun") && Contains("dpm++2m"));
    CHECK(dit::class_for_sampler_name("euler") == "EulerDiscreteScheduler");
    CHECK(dit::sampler_name_for_class("DPMSolverMultistepScheduler") == "dpm++2m");
    CHECK(dit::sampler_names() == std::vector<std::string>{"ddim", "dpm++2m", "euler"});
  }
}

TEST_CASE("sampler API contract", "[samplers]") {
  auto dpm = dit::make_sampler(dit::scheduler_defaults("DPMSolverMultistepScheduler"));
  std::vector<float> x(8, 1.0f), eps(8, 0.5f), y(8);
  CHECK_THROWS_WITH(dpm->step(0, eps.data(), x.data(), 8), Contains("set_timesteps"));
  dpm->set_timesteps(5);
  CHECK_THROWS_WITH(dpm->step(0, eps.data(), x.data(), 8), Contains("prepare"));
  dpm->prepare(8);
  CHECK_THROWS_WITH(dpm->step(1, eps.data(), x.data(), 8), Contains("in order"));
  CHECK_THROWS_WITH(dpm->step(5, eps.data(), x.data(), 8), Contains("out of range"));
  dpm->step(0, eps.data(), x.data(), 8);
  dpm->scale_model_input(x.data(), y.data(), 8, 1);
  CHECK(y == x);
  dpm->set_timesteps(5);  // resets the state: step 0 again
  CHECK_NOTHROW(dpm->step(0, eps.data(), x.data(), 8));
  CHECK_THROWS_WITH(dpm->set_timesteps(0), Contains(">= 1"));

  auto euler = dit::make_sampler(dit::scheduler_defaults("EulerDiscreteScheduler"));
  euler->set_timesteps(10);
  CHECK(euler->sigmas().size() == 11);
  CHECK(euler->sigmas().back() == 0.0);
  CHECK(euler->init_noise_sigma() == float(euler->sigmas()[0]));
  std::vector<float> z(8, 2.0f);
  euler->scale_model_input(z.data(), z.data(), 8, 0);  // in place
  const float sg = float(euler->sigmas()[0]);
  CHECK(z[0] == 2.0f / std::sqrt(sg * sg + 1.0f));
  CHECK(euler->timesteps().front() == 999.0);
  CHECK(euler->timesteps()[1] == Approx(888.0));

  auto ddim = dit::make_sampler(dit::scheduler_defaults("DDIMScheduler"));
  CHECK_THROWS_WITH(ddim->set_timesteps(1001), Contains("num_train_timesteps"));
}

TEST_CASE("numpy helpers", "[samplers]") {
  using namespace dit::sampler_detail;
  CHECK(np_round(0.5) == 0.0);
  CHECK(np_round(1.5) == 2.0);
  CHECK(np_round(2.5) == 2.0);
  CHECK(np_round(-0.5) == 0.0);
  CHECK(np_linspace(0, 999, 5) == std::vector<double>{0, 249.75, 499.5, 749.25, 999});
  CHECK(np_arange(1000, 0, -250) == std::vector<double>{1000, 750, 500, 250});
  std::vector<double> fp = {0, 10, 20};
  CHECK(np_interp_index(0.5, fp) == 5.0);
  CHECK(np_interp_index(-1, fp) == 0.0);
  CHECK(np_interp_index(7, fp) == 20.0);
  CHECK(np_interp_index(2, fp) == 20.0);
}

TEST_CASE("num_train_timesteps is bounded, with the file and key in the error", "[samplers][config]") {
  // Found by fuzzing: 1.2e13 train timesteps made the beta table 48 TB (std::bad_alloc, no file, no key).
  for (const char* t : {"2000000000", "12000000000000", "100001"}) {
    INFO(t);
    const std::string text = std::string("{\"_class_name\": \"EulerDiscreteScheduler\", \"num_train_timesteps\": ") + t + "}";
    REQUIRE_THROWS_WITH(dit::scheduler_config_from(dit::Config::parse(text, "m/scheduler/scheduler_config.json")),
                        Catch::Contains("m/scheduler/scheduler_config.json") &&
                            Catch::Contains("num_train_timesteps must be in 1..100000, got"));
  }
  const std::string ok = "{\"num_train_timesteps\": 100000}";
  CHECK(dit::scheduler_config_from(dit::Config::parse(ok, "s.json")).num_train_timesteps == 100000);
}
