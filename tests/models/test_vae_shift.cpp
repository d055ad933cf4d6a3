// VAE shift_factor (diffusers decodes latents / scaling_factor + shift_factor): a
// metamorphic test on dit-tiny's VAE. With scaling factor a, decoding latents z with
// shift_factor s must equal decoding z + s·a with no shift_factor, because
// (z + s·a) / a = z / a + s. Together with the golden tests (which pin the no-shift path to
// the PyTorch reference) this pins the shift's sign, its placement after the division, and
// that vae/config.json's shift_factor reaches the decoder.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "golden_util.h"
#include "models/vae/vae_decoder.h"
#include "runtime/json_config.h"
#include "runtime/randn.h"
#include "runtime/safetensors.h"
#include "tests/runtime/io_test_util.h"

using namespace dit_test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Decodes latents [1, C, h, w] with dit-tiny's VAE after setting scaling_factor and
// shift_factor (absent when nullopt) in a copy of vae/config.json.
std::vector<float> decode_with(const std::vector<float>& latents, int64_t h, int64_t w, double scaling,
                               std::optional<double> shift, std::optional<double>* parsed_shift = nullptr) {
  TempDir tmp;
  const std::string vae = tmp.file("vae");
  fs::copy(data_path("dit-tiny/vae"), vae, fs::copy_options::recursive);
  json j = json::parse(read_bytes(vae + "/config.json"));
  j["scaling_factor"] = scaling;
  if (shift)
    j["shift_factor"] = *shift;
  else
    j.erase("shift_factor");
  write_bytes(vae + "/config.json", j.dump(2));

  dit::VaeConfig cfg = dit::vae_config_from(dit::Config::load(vae + "/config.json"));
  if (parsed_shift) *parsed_shift = cfg.shift_factor;
  dit::VaeDecoder dec(cfg, dit::WeightStore::open_dir(vae));
  dec.prepare(1, h, w);
  const int64_t s = cfg.scale();
  std::vector<float> image(3 * h * s * w * s, -1.f);
  dec.decode(latents.data(), image.data());
  return image;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!std::isfinite(d)) return INFINITY;  // NaN/Inf never passes
    m = std::max(m, d);
  }
  return m;
}

// Fraction of pixels strictly inside (0, 1): the comparison means little if the clamp to
// [0, 1] flattens most of the image.
double unclamped_fraction(const std::vector<float>& img) {
  size_t n = 0;
  for (float v : img) n += v > 0.f && v < 1.f;
  return double(n) / double(img.size());
}

}  // namespace

TEST_CASE("VAE shift_factor: decode(z, a, s) == decode(z + s*a, a, no shift)", "[models][vae][shift]") {
  const int64_t C = 4, h = 8, w = 6;
  struct AS {
    double a, s;
  };
  const AS p = GENERATE(values<AS>({{0.5, 0.3}, {0.18215, -0.25}, {1.5305, 0.0609}}));
  INFO("scaling_factor " << p.a << " shift_factor " << p.s);

  // Latents as the sampler leaves them: N(0, 1)-ish, scaled so z / a stays O(1).
  dit::Tensor noise = dit::torch_randn(7, dit::Shape{1, C, h, w});
  std::vector<float> z(noise.f32(), noise.f32() + noise.numel());
  for (float& v : z) v *= float(p.a);
  std::vector<float> z_shifted = z;
  for (float& v : z_shifted) v = float(double(v) + p.s * p.a);

  std::optional<double> parsed;
  const std::vector<float> with_shift = decode_with(z, h, w, p.a, p.s, &parsed);
  REQUIRE(parsed.has_value());
  CHECK(*parsed == p.s);
  const std::vector<float> moved = decode_with(z_shifted, h, w, p.a, std::nullopt, &parsed);
  CHECK(!parsed.has_value());
  const std::vector<float> unshifted = decode_with(z, h, w, p.a, std::nullopt);

  CHECK(unclamped_fraction(with_shift) > 0.5);
  // The shift must matter at all for this to test anything.
  const double effect = max_abs_diff(with_shift, unshifted);
  INFO("shift changes the image by up to " << effect);
  CHECK(effect > 1e-3);

  const double d = max_abs_diff(with_shift, moved);
  INFO("decode(z; s) vs decode(z + s*a): max abs difference " << d);
  CHECK(d <= 1e-5);
}

TEST_CASE("VAE shift_factor: null is the same as absent", "[models][vae][shift]") {
  TempDir tmp;
  const std::string vae = tmp.file("vae");
  fs::copy(data_path("dit-tiny/vae"), vae, fs::copy_options::recursive);
  json j = json::parse(read_bytes(vae + "/config.json"));
  j["shift_factor"] = nullptr;
  write_bytes(vae + "/config.json", j.dump(2));
  dit::VaeConfig cfg = dit::vae_config_from(dit::Config::load(vae + "/config.json"));
  CHECK(!cfg.shift_factor.has_value());
}
