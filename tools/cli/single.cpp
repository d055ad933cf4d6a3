#include "tools/cli/single.h"

#include <chrono>
#include <cstdio>

#include "runtime/error.h"
#include "runtime/npy.h"
#include "runtime/printable.h"
#include "runtime/progress.h"

namespace dit::cli {

namespace {

// "class 207 (golden retriever)" or "prompt 'a red fox' (12 tokens)".
std::string describe_prompt(const ResolvedRequest& r) {
  if (r.prompt.class_conditional)
    return "class " + std::to_string(r.prompt.class_id) + " (" + r.prompt.label + ")";
  return "prompt '" + printable(r.req.prompt, 60) + "' (" + std::to_string(r.prompt.tokens) + " tokens)";
}

}  // namespace

int run_single(const GenOptions& o, Session& s) {
  const ProgressMode pmode = s.env.rank == 0 ? parse_progress_mode(o.progress) : ProgressMode::None;
  Request req = o.request();
  req.keep_first_noise_pred = !o.save_noise_pred.empty();
  // A bad request fails here, before the layout is printed, alike on every rank.
  const ResolvedRequest rr = same_on_every_rank([&] { return s.pipe->resolve(req); });
  if (rr.prompt.truncated && s.env.rank == 0)
    std::fprintf(stderr, "dit-gen: the prompt is longer than %d tokens: it was cut (--max-sequence-length)\n",
                 rr.max_sequence_length);
  const int m = s.pipe->info().size_multiple;
  print_layout(s, o.degrees(), int64_t(rr.gen_height / m) * (rr.gen_width / m));

  Progress progress(pmode);
  Result res = s.pipe->generate(req, [&](const StepInfo& st) {
    progress.step(st.step, st.total, st.step_seconds, st.elapsed_seconds);
  });
  progress.finish();

  if (s.pipe->parallel().is_output_rank()) {
    const auto t_write = std::chrono::steady_clock::now();
    if (!o.save_latents.empty()) write_npy(o.save_latents, res.latents);
    if (!o.save_noise_pred.empty()) write_npy(o.save_noise_pred, res.first_noise_pred);
    if (!o.no_decode) save_png(res, o.output);
    if (o.verbose)
      std::fprintf(stderr,
                   "dit-gen: times: connect %.2f s, load %.2f s, encode %.2f s, denoise %.2f s (step 1 %.2f s), decode "
                   "%.2f s, write %.2f s\n",
                   s.connect_seconds, s.load_seconds, res.encode_seconds, res.denoise_seconds, res.first_step_seconds,
                   res.decode_seconds,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t_write).count());
    if (o.verbose && s.world) print_shm_pages();
    const ResolvedRequest& r = res.request;
    std::fprintf(stderr, "dit-gen: %s, %dx%d, %d %s steps, guidance %g, seed %llu: %.2f s (%.3f s/step)%s%s\n",
                 describe_prompt(r).c_str(), r.width, r.height, r.steps, r.sampler.c_str(), r.guidance,
                 (unsigned long long)r.req.seed, res.seconds, res.denoise_seconds / r.steps, o.no_decode ? "" : " -> ",
                 o.no_decode ? "" : o.output.c_str());
    progress.event("done", {{"output", o.no_decode ? "" : o.output}, {"seconds", res.seconds}});
  }
  return 0;
}

}  // namespace dit::cli
