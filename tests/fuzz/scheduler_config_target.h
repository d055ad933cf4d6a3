// libFuzzer harness: the scheduler config path from scheduler_config.json to a sampler
// that steps. The input is a 2-byte prefix (number of steps 1..256, sampler override)
// followed by the file's text: Config::parse, scheduler_config_from, with_sampler,
// validate_scheduler_config, make_sampler, set_timesteps, then every step of a tiny
// latent with a synthetic noise prediction. Only dit::Error may come out, and no
// undefined behaviour (a NaN beta converted to an int timestep is a finding).
//
//   build-fuzz/bin/fuzz_scheduler_config -dict=tests/data/fuzz/scheduler_config/dict corpus/scheduler_config tests/data/fuzz/scheduler_config/seeds
//
// The harness body, shared by the libFuzzer binary (fuzz_<target>.cpp) and the normal
// suite, which runs every seed and regression input through it (test_fuzz_inputs.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "runtime/json_config.h"
#include "samplers/sampler.h"
#include "samplers/scheduler_config.h"

namespace dit_fuzz {

inline int scheduler_config(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int steps = 1 + data[0];
  const int sampler_choice = data[1] % 4;  // 0: the file's class; 1..3: ddim, dpm++2m, euler
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  dit_fuzz::accepts([&] {
    dit::SchedulerConfig sc = dit::scheduler_config_from(dit::Config::parse(text, "fuzz/scheduler_config.json"));
    if (sampler_choice > 0) sc = dit::with_sampler(sc, dit::sampler_names().at(size_t(sampler_choice - 1)));
    dit::validate_scheduler_config(sc);
    auto s = dit::make_sampler(sc);
    s->set_timesteps(steps);
    const int64_t n = 4;
    std::vector<float> x(n), y(n), eps(n);
    s->prepare(n);
    for (int64_t j = 0; j < n; ++j) x[size_t(j)] = float(j) - 1.5f;
    for (int i = 0; i < s->num_steps(); ++i) {
      s->scale_model_input(x.data(), y.data(), n, i);
      for (int64_t j = 0; j < n; ++j) eps[size_t(j)] = 0.1f * y[size_t(j)] + 0.01f * float(i);
      s->step(i, eps.data(), x.data(), n);
    }
  });
  return 0;
}

}  // namespace dit_fuzz
