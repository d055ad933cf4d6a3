// EulerDiscreteScheduler (diffusers scheduling_euler_discrete.py), s_churn = 0,
// interpolation_type "linear". Timesteps are float32 (not rounded for "linspace"); the
// σ table is computed in float32 by torch, interpolated in float64 by np.interp and
// cast to float32; the step is float32 per element.
#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "samplers/sampler.h"

namespace dit {
namespace {

using namespace sampler_detail;

class EulerSampler final : public Sampler {
 public:
  explicit EulerSampler(const SchedulerConfig& sc) : Sampler(sc) {}

  std::string name() const override { return "euler"; }

  void set_timesteps(int n) override {
    const int64_t T = sc_.num_train_timesteps;
    DIT_CHECK(n >= 1, "euler: number of steps must be >= 1, got " << n);
    DIT_CHECK(n <= T, "euler: " << n << " steps is more than num_train_timesteps (" << T << ")");
    std::vector<float> ts;
    if (sc_.timestep_spacing == "linspace") {
      std::vector<double> v = np_linspace(0.0, double(T - 1), n);  // dtype=float32: cast at the end
      for (auto it = v.rbegin(); it != v.rend(); ++it) ts.push_back(float(*it));
    } else if (sc_.timestep_spacing == "leading") {
      const int64_t r = T / n;
      for (int64_t i = n - 1; i >= 0; --i) ts.push_back(float(i * r) + float(sc_.steps_offset));
    } else if (sc_.timestep_spacing == "trailing") {
      for (double v : np_arange(double(T), 0.0, -(double(T) / double(n)))) ts.push_back(float(np_round(v)) - 1.0f);
    } else {
      DIT_FAIL("euler: timestep_spacing '" << sc_.timestep_spacing << "' is not supported");
    }
    // σ table in float32 (torch), then np.interp in float64.
    std::vector<double> table(alphas_cumprod_.size());
    for (size_t k = 0; k < table.size(); ++k) {
      const float a = alphas_cumprod_[k];
      table[k] = double(std::sqrt((1.0f - a) / a));
    }
    sigmas_.clear();
    for (float t : ts) sigmas_.push_back(double(float(np_interp_index(double(t), table))));
    if (sc_.final_sigmas_type == "sigma_min") {
      sigmas_.push_back(table[0]);
    } else {
      sigmas_.push_back(0.0);
    }
    timesteps_.assign(ts.begin(), ts.end());
    float max_sigma = 0.0f;
    for (double s : sigmas_) max_sigma = std::max(max_sigma, float(s));
    init_noise_sigma_ = (sc_.timestep_spacing == "linspace" || sc_.timestep_spacing == "trailing")
                            ? max_sigma
                            : std::sqrt(max_sigma * max_sigma + 1.0f);
  }

  float init_noise_sigma() const override {
    DIT_CHECK(!sigmas_.empty(), "euler: set_timesteps() was not called");
    return init_noise_sigma_;
  }

  void scale_model_input(const float* x, float* y, int64_t n, int step) const override {
    check_step(step);
    const float sigma = float(sigmas_[size_t(step)]);
    const float d = std::sqrt(sigma * sigma + 1.0f);
    for (int64_t j = 0; j < n; ++j) y[j] = x[j] / d;
  }

  void step(int i, const float* eps, float* x, int64_t n) override {
    check_step(i);
    const float sigma = float(sigmas_[size_t(i)]);  // σ̂ = σ·(γ+1), γ = 0 (s_churn 0)
    const float dt = float(sigmas_[size_t(i + 1)]) - sigma;
    if (sc_.prediction_type == "epsilon") {
      for (int64_t j = 0; j < n; ++j) {
        const float x0 = x[j] - sigma * eps[j];
        const float d = (x[j] - x0) / sigma;
        x[j] = x[j] + d * dt;
      }
    } else if (sc_.prediction_type == "v_prediction") {
      const float s2p1 = sigma * sigma + 1.0f;
      const float c_out = -sigma / std::sqrt(s2p1);
      for (int64_t j = 0; j < n; ++j) {
        const float x0 = eps[j] * c_out + x[j] / s2p1;
        const float d = (x[j] - x0) / sigma;
        x[j] = x[j] + d * dt;
      }
    } else {  // sample
      for (int64_t j = 0; j < n; ++j) {
        const float d = (x[j] - eps[j]) / sigma;
        x[j] = x[j] + d * dt;
      }
    }
  }

 private:
  float init_noise_sigma_ = 1.0f;
};

}  // namespace

std::unique_ptr<Sampler> make_euler_sampler(const SchedulerConfig& sc) { return std::make_unique<EulerSampler>(sc); }

}  // namespace dit
