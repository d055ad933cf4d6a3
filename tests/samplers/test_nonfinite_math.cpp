// torch_math::expf/logf on non-finite and out-of-range inputs: the values torch gives, and
// no undefined behaviour on the way (the UBSan build, with clang's float-cast-overflow,
// fails these if a NaN or an infinity is converted to int). A DPM-Solver++ run to σ = 0
// evaluates expf(-inf) on its final step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "samplers/sampler.h"
#include "samplers/scheduler_config.h"
#include "samplers/torch_math.h"

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// FNV-1a over the bits of expf at 2^20 + 2 points spread over [-120, 120].
uint64_t expf_fingerprint() {
  uint64_t h = 1469598103934665603ull;
  const int n = 1 << 20;
  for (int i = 0; i <= n + 1; ++i) {
    const float x = -120.0f + 240.0f * float(i) / float(n);
    const float y = dit::torch_math::expf(x);
    uint32_t b;
    std::memcpy(&b, &y, 4);
    h = (h ^ b) * 1099511628211ull;
  }
  return h;
}

}  // namespace

TEST_CASE("torch_math::expf is unchanged on finite inputs, bit for bit", "[samplers][nonfinite]") {
  // Recorded from the implementation before the non-finite fix (GCC and clang agree).
  CHECK(expf_fingerprint() == 0x686c5bbcffd7cdc0ull);
}

TEST_CASE("torch_math::expf: NaN, infinities and huge arguments", "[samplers][nonfinite]") {
  CHECK(std::isnan(dit::torch_math::expf(kNaN)));
  CHECK(std::isnan(dit::torch_math::expf(-kNaN)));
  CHECK(dit::torch_math::expf(-kInf) == 0.0f);
  CHECK(dit::torch_math::expf(kInf) == kInf);
  CHECK(dit::torch_math::expf(-3e38f) == 0.0f);
  CHECK(dit::torch_math::expf(3e38f) == kInf);
  CHECK(dit::torch_math::expf(-1e10f) == 0.0f);
  CHECK(dit::torch_math::expf(1e10f) == kInf);
  // The edges of the clamp keep their old values.
  CHECK(dit::torch_math::expf(-104.5f) == 0.0f);
  CHECK(dit::torch_math::expf(100.5f) == kInf);
  CHECK(dit::torch_math::expf(0.0f) == 1.0f);
}

TEST_CASE("torch_math::logf: NaN, infinities, zero and negatives", "[samplers][nonfinite]") {
  CHECK(std::isnan(dit::torch_math::logf(kNaN)));
  CHECK(std::isnan(dit::torch_math::logf(-kInf)));
  CHECK(std::isnan(dit::torch_math::logf(-1.0f)));
  CHECK(dit::torch_math::logf(kInf) == kInf);
  CHECK(dit::torch_math::logf(0.0f) == -kInf);
  CHECK(dit::torch_math::logf(1.0f) == 0.0f);
}

TEST_CASE("DPM-Solver++ final step to sigma 0 (expf(-inf)) is defined and lands on x0", "[samplers][nonfinite]") {
  dit::SchedulerConfig sc = dit::scheduler_defaults("DPMSolverMultistepScheduler");
  auto s = dit::make_sampler(sc);
  s->set_timesteps(4);
  std::vector<float> x(8, 0.5f), eps(8, 0.1f);
  s->prepare(int64_t(x.size()));
  for (int i = 0; i < 4; ++i) s->step(i, eps.data(), x.data(), int64_t(x.size()));
  for (float v : x) CHECK(std::isfinite(v));
}
