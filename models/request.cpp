#include "models/request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "runtime/error.h"
#include "samplers/scheduler_config.h"

namespace dit {

namespace {

std::string fmt_num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void check_size(int W, int H, int multiple, const char* what) {
  DIT_CHECK(W > 0 && H > 0 && W <= kMaxSide && H <= kMaxSide && int64_t(W) * H <= kMaxPixels,
            what << " " << W << "x" << H << " is not allowed: width and height must be in 1.." << kMaxSide
                 << " and the image at most " << kMaxPixels / 1000000 << " Mpx");
  DIT_CHECK(W % multiple == 0 && H % multiple == 0,
            what << " " << W << "x" << H << " is not allowed: width and height must be positive multiples of "
                 << multiple << " (VAE scale × patch)");
}

}  // namespace

const AspectBin& nearest_bin(const std::vector<AspectBin>& bins, int height, int width) {
  DIT_CHECK(!bins.empty(), "nearest_bin: no bins");
  const double ar = double(height) / double(width);
  const AspectBin* best = &bins[0];
  for (const AspectBin& b : bins)
    if (std::fabs(b.ratio - ar) < std::fabs(best->ratio - ar)) best = &b;
  return *best;
}

ResolvedRequest resolve_request(const Request& req, const ModelInfo& info, const FamilyRules& rules,
                                const Conditioner& conditioner, bool cfg_split, int decode_parts) {
  ResolvedRequest r;
  r.req = req;
  r.steps = req.steps.value_or(info.default_steps);
  DIT_CHECK(r.steps >= 1 && r.steps <= kMaxSteps, "steps must be in 1.." << kMaxSteps << ", got " << r.steps);
  r.guidance = req.guidance_scale.value_or(info.default_guidance);
  // The step computes in f32: a larger magnitude would be infinite there.
  DIT_CHECK(std::isfinite(r.guidance) && std::fabs(r.guidance) <= std::numeric_limits<float>::max(),
            "guidance scale must be a finite number (within a 32-bit float's range), got " << r.guidance);
  r.cfg = r.guidance > 1.0;
  DIT_CHECK(r.cfg || !cfg_split, "--cfg-parallel needs classifier-free guidance, but the guidance scale is "
                                     << r.guidance << " (<= 1 runs one branch only)");
  const auto& names = sampler_names();
  DIT_CHECK(req.sampler.empty() || std::find(names.begin(), names.end(), req.sampler) != names.end(),
            "unknown sampler '" << req.sampler << "' (supported: ddim, dpm++2m, euler)");
  r.sampler = req.sampler.empty() ? info.default_sampler : req.sampler;

  // Sizes: the output as requested; the generation size is the nearest aspect-ratio bin's
  // when the model bins (the image is resized back), else the same.
  r.width = req.width ? req.width : info.default_width;
  r.height = req.height ? req.height : info.default_height;
  const bool binning = req.resolution_binning && !rules.bins.empty();
  DIT_CHECK(req.resolution_binning || !rules.bins.empty(),
            "resolution binning cannot be turned off: " << info.family << " models generate at the requested size");
  if (binning) {
    check_size(r.width, r.height, 1, "size");
    const AspectBin& b = nearest_bin(rules.bins, r.height, r.width);
    r.gen_width = b.width;
    r.gen_height = b.height;
    check_size(r.gen_width, r.gen_height, info.size_multiple, "aspect-ratio bin");
  } else {
    check_size(r.width, r.height, info.size_multiple, "size");
    r.gen_width = r.width;
    r.gen_height = r.height;
  }
  const int latent_rows = r.gen_height / info.vae_scale;
  DIT_CHECK(!req.decode || latent_rows >= decode_parts,
            "--vae-parallel: a " << r.gen_height << "-pixel-high image has " << latent_rows << " latent rows, fewer than "
                                 << "the " << decode_parts << " bands of them it would be decoded in (one per rank or "
                                 << "machine of a replica); use fewer ranks, or --vae-parallel machines or off");

  if (info.text_to_image) {
    r.max_sequence_length = req.max_sequence_length ? req.max_sequence_length : info.default_max_sequence_length;
    DIT_CHECK(r.max_sequence_length >= 1 && r.max_sequence_length <= kMaxSequenceLength,
              "max sequence length must be in 1.." << kMaxSequenceLength << ", got " << r.max_sequence_length);
  } else {
    DIT_CHECK(req.max_sequence_length == 0,
              "--max-sequence-length is for text-to-image models; " << info.family << " prompts are class labels");
  }
  r.prompt = conditioner.resolve(req.prompt, false, r.max_sequence_length);
  r.negative = conditioner.resolve(req.negative_prompt, true, r.max_sequence_length);
  return r;
}

std::string format_parameters(const ResolvedRequest& r, const ModelInfo& info, DType dtype, DType vae_dtype) {
  std::ostringstream ps;
  ps << r.req.prompt << "\n";
  if (info.text_to_image && r.cfg) ps << "Negative prompt: " << r.req.negative_prompt << "\n";
  ps << "Steps: " << r.steps << ", Sampler: " << r.sampler << ", CFG scale: " << fmt_num(r.guidance)
     << ", Seed: " << r.req.seed << ", Size: " << r.width << "x" << r.height;
  if (r.gen_width != r.width || r.gen_height != r.height)
    ps << ", Generation size: " << r.gen_width << "x" << r.gen_height;
  ps << ", Model: " << info.name;
  if (r.prompt.class_conditional)
    ps << ", Class: " << r.prompt.class_id << (r.prompt.label.empty() ? "" : " (" + r.prompt.label + ")");
  if (info.text_to_image) ps << ", Max sequence length: " << r.max_sequence_length;
  ps << ", Dtype: " << dtype_name(dtype);
  if (vae_dtype != dtype) ps << ", VAE dtype: " << dtype_name(vae_dtype);
  ps << ", Version: dit-gen " << DIT_VERSION;
  return ps.str();
}

bool same_parameters(const std::string& a, const std::string& b) {
  const std::string key = ", Version: ";
  const size_t ia = a.rfind(key), ib = b.rfind(key);
  if (ia == std::string::npos || ib == std::string::npos) return false;
  return a.compare(0, ia, b, 0, ib) == 0 && ia == ib;
}

std::string shape_key(const ResolvedRequest& r) {
  std::ostringstream k;
  k << r.gen_width << "x" << r.gen_height << " " << r.cfg << " " << r.max_sequence_length;
  return k.str();
}

// A micro-batch shares its set-up (shape_key) and one loop: steps, sampler, decoding.
std::string batch_key(const ResolvedRequest& r) {
  std::ostringstream k;
  k << shape_key(r) << " " << r.steps << " " << r.sampler << " " << r.req.decode;
  return k.str();
}

}  // namespace dit
