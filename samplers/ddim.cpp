// DDIMScheduler (diffusers scheduling_ddim.py), eta = 0.
#include <algorithm>
#include <cmath>

#include "runtime/error.h"
#include "samplers/sampler.h"

namespace dit {
namespace {

using namespace sampler_detail;

class DDIMSampler final : public Sampler {
 public:
  explicit DDIMSampler(const SchedulerConfig& sc) : Sampler(sc) {
    final_alpha_cumprod_ = sc_.set_alpha_to_one ? 1.0f : alphas_cumprod_[0];
  }

  std::string name() const override { return "ddim"; }

  void set_timesteps(int n) override {
    const int64_t T = sc_.num_train_timesteps;
    DIT_CHECK(n >= 1, "ddim: number of steps must be >= 1, got " << n);
    DIT_CHECK(n <= T, "ddim: " << n << " steps is more than num_train_timesteps (" << T << ")");
    std::vector<double> ts;
    if (sc_.timestep_spacing == "linspace") {
      std::vector<double> v = np_linspace(0.0, double(T - 1), n);
      for (auto it = v.rbegin(); it != v.rend(); ++it) ts.push_back(np_round(*it));
    } else if (sc_.timestep_spacing == "leading") {
      const int64_t r = T / n;
      for (int64_t i = n - 1; i >= 0; --i) ts.push_back(double(i * r + sc_.steps_offset));
    } else if (sc_.timestep_spacing == "trailing") {
      for (double v : np_arange(double(T), 0.0, -(double(T) / double(n)))) ts.push_back(np_round(v) - 1.0);
    } else {
      DIT_FAIL("ddim: timestep_spacing '" << sc_.timestep_spacing << "' is not supported");
    }
    for (double t : ts)
      DIT_CHECK(t >= 0 && t < double(T), "ddim: timestep " << t << " outside [0, " << T << ") (steps_offset "
                                                            << sc_.steps_offset << ")");
    timesteps_ = std::move(ts);
    num_inference_steps_ = n;
    sigmas_.clear();
  }

  void step(int i, const float* eps, float* x, int64_t n) override {
    check_step(i);
    const int64_t t = int64_t(timesteps_[size_t(i)]);
    const int64_t prev_t = t - sc_.num_train_timesteps / num_inference_steps_;
    const float a_t = alphas_cumprod_[size_t(t)];
    const float a_prev = prev_t >= 0 ? alphas_cumprod_[size_t(prev_t)] : final_alpha_cumprod_;
    const float b_t = 1.0f - a_t;
    const float sa_t = std::sqrt(a_t), sb_t = std::sqrt(b_t);
    const float sa_prev = std::sqrt(a_prev);
    const float dir = std::sqrt(1.0f - a_prev - 0.0f);  // (1 - ᾱ_prev - σ_t²)^½, σ_t = 0 (eta 0)
    const bool clip = sc_.clip_sample;
    const float lim = float(sc_.clip_sample_range);
    const int pt = sc_.prediction_type == "epsilon" ? 0 : sc_.prediction_type == "sample" ? 1 : 2;
    for (int64_t j = 0; j < n; ++j) {
      const float e = eps[j], s = x[j];
      float x0, pe;
      if (pt == 0) {  // epsilon
        x0 = (s - sb_t * e) / sa_t;
        pe = e;
      } else if (pt == 1) {  // sample
        x0 = e;
        pe = (s - sa_t * x0) / sb_t;
      } else {  // v_prediction
        x0 = sa_t * s - sb_t * e;
        pe = sa_t * e + sb_t * s;
      }
      if (clip) x0 = std::min(std::max(x0, -lim), lim);
      x[j] = sa_prev * x0 + dir * pe;
    }
  }

 private:
  float final_alpha_cumprod_ = 1.0f;
  int64_t num_inference_steps_ = 0;
};

}  // namespace

std::unique_ptr<Sampler> make_ddim_sampler(const SchedulerConfig& sc) { return std::make_unique<DDIMSampler>(sc); }

}  // namespace dit
