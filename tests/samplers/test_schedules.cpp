// Timesteps, sigmas, alphas_cumprod and full sampling trajectories against the values
// from tests/data/samplers/gen_expected.py (torch/numpy re-implementation of diffusers).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "samplers/sampler.h"
#include "samplers_test_util.h"

using dit_test::config_for;
using dit_test::expected;

namespace {

std::vector<double> dbl(const nlohmann::json& j) { return j.get<std::vector<double>>(); }

// Counts elements that differ by more than rel (relative to max(|a|, |b|, 1e-30)).
int count_rel_mismatch(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double scale = std::max({std::fabs(got[i]), std::fabs(want[i]), 1e-30});
    if (!(std::fabs(got[i] - want[i]) <= rel * scale)) ++bad;
  }
  return bad;
}

void synthetic_model(const float* x, float* eps, int n, int i) {
  for (int j = 0; j < n; ++j) eps[j] = x[j] * 0.1f + float(0.05 * std::sin(double(i) + 0.1 * double(j)));
}

}  // namespace

TEST_CASE("alphas_cumprod matches torch bit for bit", "[samplers]") {
  for (const char* sched : {"linear", "scaled_linear", "squaredcos_cap_v2"}) {
    INFO("beta_schedule " << sched);
    dit::SchedulerConfig sc = dit::scheduler_defaults("DDIMScheduler");
    sc.beta_schedule = sched;
    if (std::string(sched) == "scaled_linear") {
      sc.beta_start = 0.00085;
      sc.beta_end = 0.012;
    }
    std::vector<float> ac = dit::alphas_cumprod(sc);
    std::vector<double> want = dbl(expected()["alphas_cumprod"][sched]);
    REQUIRE(ac.size() == want.size());
    int exact_mismatch = 0;
    for (size_t i = 0; i < ac.size(); ++i) exact_mismatch += double(ac[i]) != want[i];
    CHECK(exact_mismatch == 0);
  }
  dit::SchedulerConfig sc = dit::scheduler_defaults("DDIMScheduler");
  std::vector<float> ac = dit::alphas_cumprod(sc);
  CHECK(ac[0] == Approx(0.9999).epsilon(1e-7));
  CHECK(ac[999] == Approx(4.0358e-5).epsilon(1e-4));
}

TEST_CASE("known schedules from docs/samplers.md", "[samplers]") {
  SECTION("DDIM leading") {
    auto s = dit::make_sampler(dit::scheduler_defaults("DDIMScheduler"));
    s->set_timesteps(50);
    REQUIRE(s->num_steps() == 50);
    CHECK(s->timesteps().front() == 980);
    CHECK(s->timesteps()[1] == 960);
    CHECK(s->timesteps().back() == 0);
    s->set_timesteps(4);
    CHECK(s->timesteps() == std::vector<double>{750, 500, 250, 0});
    CHECK(s->sigmas().empty());
    CHECK(s->init_noise_sigma() == 1.0f);
  }
  SECTION("DPM linspace") {
    auto s = dit::make_sampler(dit::scheduler_defaults("DPMSolverMultistepScheduler"));
    s->set_timesteps(20);
    REQUIRE(s->num_steps() == 20);
    CHECK(s->timesteps()[0] == 999);
    CHECK(s->timesteps()[1] == 949);
    CHECK(s->timesteps()[18] == 100);
    CHECK(s->timesteps()[19] == 50);
    s->set_timesteps(4);
    CHECK(s->timesteps() == std::vector<double>{999, 749, 500, 250});
    std::vector<double> sig = s->sigmas();
    REQUIRE(sig.size() == 5);
    CHECK(sig[0] == Approx(157.4073).epsilon(1e-6));
    CHECK(sig[1] == Approx(17.2470).epsilon(1e-5));
    CHECK(sig[2] == Approx(3.4430).epsilon(1e-4));
    CHECK(sig[3] == Approx(0.9580).epsilon(1e-4));
    CHECK(sig[4] == 0.0);
    CHECK(s->init_noise_sigma() == 1.0f);
  }
}

TEST_CASE("timesteps and sigmas match the reference for every spacing", "[samplers]") {
  int checked = 0;
  for (const auto& e : expected()["schedules"]) {
    const std::string kind = e["kind"];
    nlohmann::json cfg = e.contains("config") ? e["config"] : nlohmann::json::object();
    if (!e.contains("config")) cfg["timestep_spacing"] = e["timestep_spacing"];
    const int n = e["n"];
    INFO(kind << " " << cfg.dump() << " n=" << n);
    auto s = dit::make_sampler(config_for(kind, cfg));
    s->set_timesteps(n);
    CHECK(s->timesteps() == dbl(e["timesteps"]));
    std::vector<double> want_sig = dbl(e["sigmas"]);
    REQUIRE(s->sigmas().size() == want_sig.size());
    CHECK(s->sigmas() == want_sig);  // float32 values, exact
    CHECK(double(s->init_noise_sigma()) == double(e["init_noise_sigma"]));
    ++checked;
  }
  CHECK(checked >= 27);
}

TEST_CASE("sampling trajectories with a synthetic model match the reference", "[samplers]") {
  const std::vector<double> x_init = dbl(expected()["x_init"]);
  const int n = int(x_init.size());
  int checked = 0;
  for (const auto& e : expected()["trajectories"]) {
    const std::string kind = e["kind"];
    const int steps = e["n"];
    INFO(kind << " " << e["config"].dump() << " steps=" << steps);
    auto s = dit::make_sampler(config_for(kind, e["config"]));
    s->set_timesteps(steps);
    s->prepare(n);
    std::vector<float> x(x_init.begin(), x_init.end()), xin(n), eps(n);
    for (float& v : x) v *= s->init_noise_sigma();
    for (int i = 0; i < s->num_steps(); ++i) {
      s->scale_model_input(x.data(), xin.data(), n, i);
      synthetic_model(xin.data(), eps.data(), n, i);
      s->step(i, eps.data(), x.data(), n);
    }
    std::vector<double> got(x.begin(), x.end());
    std::vector<double> want = dbl(e["final"]);
    CHECK(count_rel_mismatch(got, want, 1e-5) == 0);
    int exact = 0;
    for (int j = 0; j < n; ++j) exact += got[j] == want[j];
    CHECK(exact == n);  // the arithmetic mirrors torch's float32 ops one for one
    ++checked;
  }
  CHECK(checked >= 13);
}
