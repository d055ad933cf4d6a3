#include "tools/cli/single.h"

#include <cstdio>

#include "runtime/error.h"
#include "runtime/npy.h"
#include "runtime/progress.h"

namespace dit::cli {

int run_single(const GenOptions& o, Session& s) {
  DIT_CHECK(!o.prompt.empty(), "--prompt is required (a class label or id; or --batch FILE)");
  const ProgressMode pmode = s.env.rank == 0 ? parse_progress_mode(o.progress) : ProgressMode::None;
  const ModelInfo& info = s.pipe->info();
  Request req;
  req.prompt = o.prompt;
  req.negative_prompt = o.negative_prompt;
  req.seed = o.seed;
  req.steps = o.steps;
  req.guidance_scale = o.guidance;
  req.sampler = o.sampler;
  req.width = o.width;
  req.height = o.height;
  req.decode = !o.no_decode;
  {
    const int W = o.width ? o.width : info.default_width, H = o.height ? o.height : info.default_height;
    const int m = info.size_multiple > 0 ? info.size_multiple : 1;
    print_layout(s, o.degrees(), int64_t(H / m) * (W / m));
  }

  Progress progress(pmode);
  Result res = s.pipe->generate(req, [&](const StepInfo& st) {
    progress.step(st.step, st.total, st.step_seconds, st.elapsed_seconds);
  });
  progress.finish();

  if (s.pipe->exchange().is_output_rank()) {
    if (!o.save_latents.empty()) write_npy(o.save_latents, res.latents);
    if (!o.save_noise_pred.empty()) write_npy(o.save_noise_pred, res.eps0);
    if (!o.no_decode) save_png(res, o.output);
    std::fprintf(stderr, "dit-gen: class %d (%s), %dx%d, %d %s steps, guidance %g, seed %llu: %.2f s (%.3f s/step)%s%s\n",
                 res.class_id, res.label.c_str(), res.width, res.height, res.steps, res.sampler.c_str(),
                 res.guidance_scale, (unsigned long long)res.seed, res.seconds, res.denoise_seconds / res.steps,
                 o.no_decode ? "" : " -> ", o.no_decode ? "" : o.output.c_str());
    if (pmode == ProgressMode::Json)
      progress.event("done", "\"output\":" + json_quote(o.no_decode ? "" : o.output) +
                                 ",\"seconds\":" + std::to_string(res.seconds));
  }
  return 0;
}

}  // namespace dit::cli
