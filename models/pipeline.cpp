// The denoising pipeline shared by every model family (diffusers' DiTPipeline,
// PixArtSigmaPipeline, PixArtAlphaPipeline): prompts -> conditioning, torch-compatible
// noise, the sampler loop with classifier-free guidance over the model, the VAE decoder.
// What differs between families comes through models/diffusion_model.h and the plain rules
// of models/model_family.h.
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "models/common/embeddings.h"
#include "models/dit_gen.h"
#include "models/model_family.h"
#include "models/model_index.h"
#include "models/request.h"
#include "models/vae/vae_decoder.h"
#include "runtime/error.h"
#include "runtime/json_config.h"
#include "runtime/png.h"
#include "runtime/randn.h"
#include "runtime/resize.h"
#include "runtime/safetensors.h"
#include "samplers/sampler.h"
#include "samplers/scheduler_config.h"

namespace dit {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string model_name(const std::string& dir) {
  namespace fs = std::filesystem;
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty() || name == ".") name = fs::absolute(dir).lexically_normal().parent_path().filename().string();
  return name;
}

}  // namespace

struct Pipeline::Impl {
  FamilyRules rules;
  std::unique_ptr<DiffusionModel> model;
  std::unique_ptr<Conditioner> conditioner;
  VaeConfig vcfg;
  WeightStore vstore;
  std::unique_ptr<VaeDecoder> vae;
  SchedulerConfig scfg;
  ModelInfo info;
  DType dtype = DType::F32, vae_dtype = DType::F32;
  bool weight_cache_on = false;  // the VAE's convolution weights have packed entries (Winograd)
  std::shared_ptr<ParallelContext> ctx;
  Conditioning cond;

  // Per-shape state (rebuilt only when the batch or size changes). The model batch holds
  // `items` latents once per guidance half computed here.
  int64_t B = 0, K = 0, h = 0, w = 0, L = 0;
  int64_t vae_h = 0, vae_w = 0;
  bool cfg_split = false;  // the last generation's guidance halves ran on two rank groups
  Tensor x, xs, x_in, local_out, full_out, eps, eps_both, guided, raw_image;
  std::vector<double> tvec;

  void ensure_shape(int64_t batch, int64_t items, int64_t lh, int64_t lw, int64_t text_len);
  std::vector<CondRow> rows(const std::vector<ResolvedRequest>& rs, int branch) const;
  void denoise(const std::vector<ResolvedRequest>& rs, std::vector<std::unique_ptr<Sampler>>& samplers,
               std::vector<Result>& res, const ProgressFn& progress);
  void decode(const ResolvedRequest& r, const float* latents, Result& res, RowSplit* split);
};

void Pipeline::Impl::ensure_shape(int64_t batch, int64_t items, int64_t lh, int64_t lw, int64_t text_len) {
  if (batch == B && items == K && lh == h && lw == w && text_len == L) return;
  const ModelGeometry& g = model->geometry();
  const int64_t C = g.in_channels, N = (lh / g.patch) * (lw / g.patch), row = g.patch_row_out();
  ModelShape s;
  s.batch = batch;
  s.latent_h = lh;
  s.latent_w = lw;
  s.text_tokens = text_len;
  model->prepare(s, *ctx);
  const TokenRange r = ctx->sequence().output_range(N);
  ctx->sequence().prepare(batch, N, row);
  ctx->cfg().prepare(items * C * lh * lw);
  x = Tensor::empty({items, C, lh, lw});
  xs = Tensor::empty({items, C, lh, lw});
  x_in = Tensor::empty({batch, C, lh, lw});
  local_out = Tensor::empty({batch, r.size(), row});
  full_out = Tensor::empty({batch, N, row});
  eps = Tensor::empty({batch, C, lh, lw});
  eps_both = Tensor::empty({2 * items, C, lh, lw});
  guided = Tensor::empty({items, C, lh, lw});
  tvec.assign(size_t(batch), 0.0);
  B = batch;
  K = items;
  h = lh;
  w = lw;
  L = text_len;
}

// The conditioning rows of the model batch in batch order: the guidance halves this rank
// computes (both, or its own under --cfg-parallel), each holding every item.
std::vector<CondRow> Pipeline::Impl::rows(const std::vector<ResolvedRequest>& rs, int branch) const {
  std::vector<CondRow> out;
  auto half = [&](bool unconditional) {
    for (const ResolvedRequest& r : rs) out.push_back({unconditional ? r.req.negative_prompt : r.req.prompt, unconditional});
  };
  if (!rs[0].cfg) {
    half(false);
    return out;
  }
  const bool first_uncond = !rules.cond_first;  // halves in family order: DiT [cond, uncond], PixArt [uncond, cond]
  for (int b = 0; b < 2; ++b)
    if (branch == -1 || branch == b) half(b == 0 ? first_uncond : !first_uncond);
  return out;
}

void Pipeline::Impl::denoise(const std::vector<ResolvedRequest>& rs, std::vector<std::unique_ptr<Sampler>>& samplers,
                             std::vector<Result>& res, const ProgressFn& progress) {
  const ModelGeometry& g = model->geometry();
  const int64_t k = int64_t(rs.size()), C = g.in_channels, n = C * h * w;
  const bool use_cfg = rs[0].cfg;
  const bool split = use_cfg && ctx->cfg().branch() != -1;
  const int64_t cond_half = rules.cond_first ? 0 : 1;
  const std::vector<double>& ts = samplers[0]->timesteps();
  const auto t_loop = Clock::now();
  for (int i = 0; i < int(ts.size()); ++i) {
    const auto t_step = Clock::now();
    for (int64_t j = 0; j < k; ++j) samplers[j]->scale_model_input(x.f32() + j * n, xs.f32() + j * n, n, i);
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(x_in.f32() + b * n, xs.f32() + (b % k) * n, size_t(n) * 4);
      tvec[size_t(b)] = ts[size_t(i)];
    }
    model->forward(x_in.f32(), tvec.data(), local_out.f32());  // [B, this rank's output tokens, p·p·C_out]
    ctx->sequence().gather(local_out.f32(), full_out.f32());  // [B, N, p·p·C_out]
    unpatchify(full_out.f32(), B, h / g.patch, w / g.patch, g.patch, g.out_channels, C,
               eps.f32());  // [B, C, h, w] (learned sigma dropped)
    const float* both = eps.f32();  // the two halves, k items each, when guided
    if (split) {
      ctx->cfg().exchange(eps.f32(), eps_both.f32());
      both = eps_both.f32();
    }
    for (int64_t j = 0; j < k; ++j) {
      const float* e = eps.f32() + j * n;
      if (use_cfg) {
        const float gs = float(rs[size_t(j)].guidance);
        const float *cond = both + (cond_half * k + j) * n, *unc = both + ((1 - cond_half) * k + j) * n;
        float* gd = guided.f32() + j * n;
        for (int64_t e2 = 0; e2 < n; ++e2) gd[e2] = unc[e2] + gs * (cond[e2] - unc[e2]);  // uncond + g·(cond − uncond)
        e = gd;
      }
      if (i == 0 && res[size_t(j)].first_noise_pred.defined()) std::memcpy(res[size_t(j)].first_noise_pred.f32(), e, size_t(n) * 4);
      samplers[size_t(j)]->step(i, e, x.f32() + j * n, n);
    }
    if (progress) {
      StepInfo si;
      si.step = i + 1;
      si.total = int(ts.size());
      si.step_seconds = since(t_step);
      si.elapsed_seconds = since(t_loop);
      progress(si);
    }
  }
}

// VAE decode at the generation size, then (binning) back to the requested size as diffusers
// does: bilinear resize of the decoder output and a centre crop, before denormalising.
// split: the band of rows this rank decodes (--vae-parallel; every decoding rank gets the image), or null.
void Pipeline::Impl::decode(const ResolvedRequest& r, const float* latents, Result& res, RowSplit* split) {
  const int64_t lh = r.gen_height / info.vae_scale, lw = r.gen_width / info.vae_scale;
  if (vae_h != lh || vae_w != lw) {
    vae->prepare(1, lh, lw, split);
    raw_image = Tensor::empty({1, 3, int64_t(r.gen_height), int64_t(r.gen_width)});
    vae_h = lh;
    vae_w = lw;
  }
  res.image = Tensor::empty({1, 3, r.height, r.width});
  if (r.gen_width == r.width && r.gen_height == r.height) {
    vae->decode(latents, res.image.f32());
    return;
  }
  vae->decode_raw(latents, raw_image.f32());
  resize_and_center_crop(raw_image.f32(), 3, r.gen_height, r.gen_width, res.image.f32(), r.height, r.width);
  to_unit_range(res.image.f32(), res.image.numel());
}

Pipeline::Pipeline() : impl_(std::make_unique<Impl>()) {}
Pipeline::~Pipeline() = default;
const ModelInfo& Pipeline::info() const { return impl_->info; }
ParallelContext& Pipeline::parallel() { return *impl_->ctx; }
ModelFlops Pipeline::flops() const {
  ModelFlops f = impl_->model->flops();  // this rank's batch: one guidance half under --cfg-parallel
  if (impl_->cfg_split) {
    for (double* v : {&f.linear, &f.attention, &f.cross_attention, &f.conditioning, &f.per_request}) *v *= 2;
  }
  return f;
}

std::unique_ptr<Pipeline> Pipeline::load(const PipelineOptions& opt) {
  std::unique_ptr<Pipeline> p(new Pipeline());
  Impl& m = *p->impl_;
  const std::string& dir = opt.model_dir;
  const ModelIndex index = ModelIndex::load(dir);
  const Config tcfg = Config::load(dir + "/transformer/config.json");
  const FamilyEntry& family = find_family(index, tcfg);
  m.vcfg = vae_config_from(Config::load(dir + "/vae/config.json"));
  m.scfg = scheduler_config_from(Config::load(dir + "/scheduler/scheduler_config.json"));
  m.ctx = opt.parallel ? opt.parallel : make_serial_context();
  LoadOptions lo;
  lo.dir = dir;
  lo.parallel = m.ctx.get();
  lo.dtype = opt.dtype;
  lo.qkv = opt.qkv;
  lo.release_text_encoder = opt.release_text_encoder;
  lo.weight_cache = opt.weight_cache;
  LoadedFamily f = family.load(lo, index, tcfg);
  m.rules = std::move(f.rules);
  m.model = std::move(f.model);
  m.conditioner = std::move(f.conditioner);
  const ModelGeometry& g = m.model->geometry();
  DIT_CHECK(m.vcfg.latent_channels == g.in_channels,
            dir << ": the VAE has " << m.vcfg.latent_channels << " latent channels but the transformer takes "
                << g.in_channels);
  m.dtype = opt.dtype;
  m.weight_cache_on = !opt.weight_cache.dir.empty();
  m.vae_dtype = opt.vae_dtype.value_or(opt.dtype);
  m.vstore = WeightStore::open_dir(dir + "/vae");
  // The VAE's weights are read as f32 (converted through the cache when stored in half
  // precision); each convolution keeps its own copy in its layout and compute type.
  use_weight_cache(m.vstore, DType::F32, opt.weight_cache);
  m.vae = std::make_unique<VaeDecoder>(m.vcfg, m.vstore, m.vae_dtype);

  ModelInfo& i = m.info;
  i.dir = dir;
  i.name = model_name(dir);
  i.family = m.rules.family;
  i.text_to_image = m.rules.prompt == PromptKind::Text;
  i.vae_scale = m.vcfg.scale();
  i.default_width = i.default_height = g.sample_size * i.vae_scale;
  i.size_multiple = i.vae_scale * g.patch;
  i.default_steps = m.rules.default_steps;
  i.default_guidance = m.rules.default_guidance;
  i.default_max_sequence_length = m.rules.default_max_sequence_length;
  i.resolution_binning = !m.rules.bins.empty();
  i.num_classes = m.rules.num_classes;
  i.text_vocab = m.rules.text_vocab;
  i.cond_first = m.rules.cond_first;
  i.heads = g.heads;
  i.hidden = g.hidden;
  i.layers = g.layers;
  i.default_sampler = sampler_name_for_class(m.scfg.class_name);
  return p;
}

ResolvedRequest Pipeline::resolve(const Request& req) const {
  const Impl& m = *impl_;
  return resolve_request(req, m.info, m.rules, *m.conditioner, m.ctx->cfg().branch() != -1, m.ctx->decode_parts());
}

DType Pipeline::vae_dtype() const { return impl_->vae_dtype; }
bool Pipeline::vae_winograd() const { return VaeDecoder::winograd_for(impl_->vae_dtype, impl_->weight_cache_on); }

std::string Pipeline::parameters(const ResolvedRequest& r) const {
  return format_parameters(r, impl_->info, impl_->dtype, impl_->vae_dtype);
}

Result Pipeline::generate(const Request& req, const ProgressFn& progress) {
  return std::move(generate_batch({req}, progress).front());
}

std::vector<Result> Pipeline::generate_batch(const std::vector<Request>& reqs, const ProgressFn& progress) {
  Impl& m = *impl_;
  const auto t_start = Clock::now();
  DIT_CHECK(!reqs.empty(), "generate_batch: no requests");
  std::vector<ResolvedRequest> rs;
  for (const Request& req : reqs) {
    rs.push_back(resolve(req));
    DIT_CHECK(batch_key(rs.back()) == batch_key(rs.front()),
              "generate_batch: requests of one micro-batch must share size, steps, sampler, decoding, text length "
              "and whether guidance is on");
  }
  const ResolvedRequest& r0 = rs.front();
  const int64_t k = int64_t(rs.size());
  const ModelGeometry& g = m.model->geometry();
  const int64_t lh = r0.gen_height / m.info.vae_scale, lw = r0.gen_width / m.info.vae_scale;
  const int64_t C = g.in_channels, n = C * lh * lw;

  // One sampler per item (each keeps its own multistep state).
  const SchedulerConfig sc = reqs[0].sampler.empty() ? m.scfg : with_sampler(m.scfg, reqs[0].sampler);
  std::vector<std::unique_ptr<Sampler>> samplers;
  for (int64_t j = 0; j < k; ++j) {
    samplers.push_back(make_sampler(sc));
    samplers.back()->set_timesteps(r0.steps);
    samplers.back()->prepare(n);
  }

  const int branch = m.ctx->cfg().branch();
  m.cfg_split = r0.cfg && branch != -1;
  const std::vector<CondRow> rows = m.rows(rs, branch);
  m.ensure_shape(int64_t(rows.size()), k, lh, lw, r0.max_sequence_length);
  const auto t_encode = Clock::now();
  m.conditioner->encode(rows, r0.max_sequence_length, m.cond);
  const double encode = since(t_encode);
  m.cond.image_height = r0.gen_height;
  m.cond.image_width = r0.gen_width;
  m.cond.schedule = samplers[0]->timesteps();
  m.model->begin(m.cond);

  std::vector<Result> res(reqs.size());
  for (int64_t j = 0; j < k; ++j) {
    res[j].request = rs[j];
    if (rs[j].req.keep_first_noise_pred) res[j].first_noise_pred = Tensor::empty({1, C, lh, lw});
    const Tensor noise = torch_randn(rs[j].req.seed, {1, C, lh, lw});
    const float sigma0 = samplers[j]->init_noise_sigma();
    float* x = m.x.f32() + j * n;
    for (int64_t e = 0; e < n; ++e) x[e] = noise.f32()[e] * sigma0;
  }

  const auto t_loop = Clock::now();
  double first_step = 0;
  m.denoise(rs, samplers, res, [&](const StepInfo& st) {
    if (st.step == 1) first_step = st.step_seconds;
    if (progress) progress(st);
  });
  m.ctx->check_agreement(m.x.f32(), k * n);
  const double denoise = since(t_loop);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t e = 0; e < n; ++e)
      DIT_CHECK(std::isfinite(m.x.f32()[j * n + e]),
                "the latents are not finite (NaN or infinity) after denoising (guidance scale "
                    << rs[size_t(j)].guidance << "): the checkpoint's weights or its configuration (" << m.info.dir
                    << "), or a guidance scale this large, produce non-finite values; no image was written");

  for (int64_t j = 0; j < k; ++j) {
    Result& r = res[j];
    r.latents = Tensor::empty({1, C, lh, lw});
    std::memcpy(r.latents.f32(), m.x.f32() + j * n, size_t(n) * 4);
    const auto t_decode = Clock::now();
    if (rs[j].req.decode) m.ctx->run_output([&](RowSplit* split) { m.decode(rs[j], r.latents.f32(), r, split); });
    r.decode_seconds = since(t_decode);
    r.encode_seconds = encode / double(k);
    r.denoise_seconds = denoise / double(k);
    r.first_step_seconds = first_step / double(k);
    r.parameters = parameters(rs[j]);
  }
  const double total = since(t_start);
  for (Result& r : res) r.seconds = total / double(k);
  return res;
}

void save_png(const Result& res, const std::string& path) {
  DIT_CHECK(res.image.defined(), "save_png: the result has no decoded image");
  const int H = int(res.image.dim(2)), W = int(res.image.dim(3));
  std::vector<uint8_t> rgb = image_to_rgb8(res.image.f32(), H, W);
  write_png(path, rgb.data(), W, H, res.parameters);
}

}  // namespace dit
