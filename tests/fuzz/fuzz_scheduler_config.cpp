// libFuzzer harness: the scheduler config path from scheduler_config.json to a sampler
// that steps. The input is a 2-byte prefix (number of steps 1..256, sampler override)
// followed by the file's text: Config::parse, scheduler_config_from, with_sampler,
// validate_scheduler_config, make_sampler, set_timesteps, then every step of a tiny
// latent with a synthetic noise prediction. Only dit::Error may come out, and no
// undefined behaviour (a NaN beta converted to an int timestep is a finding).
//
//   build-fuzz/bin/fuzz_scheduler_config -dict=tests/data/fuzz/scheduler_config/dict \
//       corpus/scheduler_config tests/data/fuzz/scheduler_config/seeds
#include <cstddef>
#include <cstdint>

#include "scheduler_config_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return dit_fuzz::scheduler_config(data, size); }
