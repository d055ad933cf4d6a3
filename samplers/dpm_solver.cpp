// DPMSolverMultistepScheduler (diffusers scheduling_dpmsolver_multistep.py):
// dpmsolver++, solver_order 1 or 2 (2M), midpoint or heun, final sigma zero or sigma_min.
// The arithmetic follows the project's PyTorch reference (dit_reference.py DPMpp2M, the
// source of the golden data): the σ table is computed in float64 from the float32
// ᾱ (numpy), interpolated at the timesteps and cast to float32; α, σ, λ and the update
// coefficients are float32 scalars (0-dim torch tensors, exp/log as torch's Sleef kernels);
// the update is float32 per element.
#include <cmath>
#include <limits>
#include <utility>

#include "runtime/error.h"
#include "samplers/sampler.h"
#include "samplers/torch_math.h"

namespace dit {
namespace {

using namespace sampler_detail;

struct AlphaSigma {
  float alpha, sigma, lambda;
};

// _sigma_to_alpha_sigma_t and λ = log α − log σ, in float32.
AlphaSigma alpha_sigma(float sigma) {
  const float a = 1.0f / std::sqrt(sigma * sigma + 1.0f);
  const float s = sigma * a;
  return {a, s, torch_math::logf(a) - torch_math::logf(s)};
}

class DPMSolverSampler final : public Sampler {
 public:
  explicit DPMSolverSampler(const SchedulerConfig& sc) : Sampler(sc) {}

  std::string name() const override { return "dpm++2m"; }

  void set_timesteps(int n) override {
    const int64_t T = sc_.num_train_timesteps;
    DIT_CHECK(n >= 1, "dpm++2m: number of steps must be >= 1, got " << n);
    DIT_CHECK(n <= T, "dpm++2m: " << n << " steps is more than num_train_timesteps (" << T << ")");
    // last = T - searchsorted(flip(λ_t), lambda_min_clipped): the count of λ_t below it.
    int64_t clipped = 0;
    if (!(sc_.lambda_min_clipped == -std::numeric_limits<double>::infinity())) {
      const float lmc = float(sc_.lambda_min_clipped);
      for (float ac : alphas_cumprod_) {
        const float lam = torch_math::logf(std::sqrt(ac)) - torch_math::logf(std::sqrt(1.0f - ac));
        if (lam < lmc) ++clipped;
      }
    }
    const int64_t last = T - clipped;
    DIT_CHECK(last >= 1, "dpm++2m: lambda_min_clipped " << sc_.lambda_min_clipped << " clips every timestep");
    std::vector<double> ts;
    if (sc_.timestep_spacing == "linspace") {
      std::vector<double> v = np_linspace(0.0, double(last - 1), n + 1);
      for (int64_t i = n; i >= 1; --i) ts.push_back(np_round(v[size_t(i)]));
    } else if (sc_.timestep_spacing == "leading") {
      const int64_t r = last / (n + 1);
      for (int64_t i = n; i >= 1; --i) ts.push_back(double(i * r + sc_.steps_offset));
    } else if (sc_.timestep_spacing == "trailing") {
      for (double v : np_arange(double(last), 0.0, -(double(T) / double(n)))) ts.push_back(np_round(v) - 1.0);
    } else {
      DIT_FAIL("dpm++2m: timestep_spacing '" << sc_.timestep_spacing << "' is not supported");
    }
    // σ(t) = √((1−ᾱ)/ᾱ) in float64 (numpy), np.interp at the timesteps, then float32.
    std::vector<double> table(alphas_cumprod_.size());
    for (size_t k = 0; k < table.size(); ++k) {
      const double a = alphas_cumprod_[k];
      table[k] = std::sqrt((1.0 - a) / a);
    }
    sigmas_.clear();
    for (double t : ts) sigmas_.push_back(double(float(np_interp_index(t, table))));
    if (sc_.final_sigmas_type == "sigma_min") {
      const float a0 = alphas_cumprod_[0];
      sigmas_.push_back(double(std::sqrt((1.0f - a0) / a0)));
    } else {
      sigmas_.push_back(0.0);
    }
    timesteps_ = std::move(ts);
    next_step_ = 0;
  }

  void prepare(int64_t n_elems) override {
    DIT_CHECK(n_elems >= 0, "dpm++2m: prepare: negative size " << n_elems);
    prepared_elems_ = n_elems;
    x0_.assign(size_t(n_elems), 0.0f);
    prev_x0_.assign(size_t(n_elems), 0.0f);
  }

  void step(int i, const float* eps, float* x, int64_t n) override {
    check_step(i);
    DIT_CHECK(n == prepared_elems_, "dpm++2m: step on " << n << " elements, but prepare() was called for "
                                                         << prepared_elems_);
    DIT_CHECK(i == next_step_, "dpm++2m: steps must be taken in order: expected step " << next_step_ << ", got " << i);
    const int N = num_steps();
    const bool last = i == N - 1;
    const bool lower_order_final =
        last && (sc_.euler_at_final || (sc_.lower_order_final && N < 15) || sc_.final_sigmas_type == "zero");
    const bool first_order = sc_.solver_order == 1 || i == 0 || lower_order_final;

    const AlphaSigma cur = alpha_sigma(float(sigmas_[size_t(i)]));
    const float sigma_next = float(sigmas_[size_t(i + 1)]);
    const AlphaSigma nxt = alpha_sigma(sigma_next);

    // convert_model_output (dpmsolver++): the model's x0.
    float* x0 = x0_.data();
    if (sc_.prediction_type == "epsilon") {
      for (int64_t j = 0; j < n; ++j) x0[j] = (x[j] - cur.sigma * eps[j]) / cur.alpha;
    } else if (sc_.prediction_type == "v_prediction") {
      for (int64_t j = 0; j < n; ++j) x0[j] = cur.alpha * x[j] - cur.sigma * eps[j];
    } else {  // sample
      for (int64_t j = 0; j < n; ++j) x0[j] = eps[j];
    }

    const float h = nxt.lambda - cur.lambda;
    const float em1 = torch_math::expf(-h) - 1.0f;
    const float ratio = nxt.sigma / cur.sigma;
    const float c0 = nxt.alpha * em1;
    if (last && sigma_next == 0.0f && first_order) {
      // The final step to σ = 0 lands on x0 exactly.
      for (int64_t j = 0; j < n; ++j) x[j] = x0[j];
    } else if (first_order) {
      for (int64_t j = 0; j < n; ++j) x[j] = ratio * x[j] - c0 * x0[j];
    } else {
      const AlphaSigma prv = alpha_sigma(float(sigmas_[size_t(i - 1)]));
      const float h0 = cur.lambda - prv.lambda;
      const float r0 = h0 / h;
      const float inv_r0 = 1.0f / r0;
      const float* m1 = prev_x0_.data();
      if (sc_.solver_type == "midpoint") {
        const float c1 = 0.5f * c0;
        for (int64_t j = 0; j < n; ++j) {
          const float d1 = inv_r0 * (x0[j] - m1[j]);
          x[j] = ratio * x[j] - c0 * x0[j] - c1 * d1;
        }
      } else {  // heun
        const float c1 = nxt.alpha * (em1 / h + 1.0f);
        for (int64_t j = 0; j < n; ++j) {
          const float d1 = inv_r0 * (x0[j] - m1[j]);
          x[j] = ratio * x[j] - c0 * x0[j] + c1 * d1;
        }
      }
    }
    std::swap(x0_, prev_x0_);
    next_step_ = i + 1;
  }

 private:
  std::vector<float> x0_, prev_x0_;
  int next_step_ = 0;
};

}  // namespace

std::unique_ptr<Sampler> make_dpm_sampler(const SchedulerConfig& sc) { return std::make_unique<DPMSolverSampler>(sc); }

}  // namespace dit
