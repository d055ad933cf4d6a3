// DiTPipeline (diffusers pipelines/dit/pipeline_dit.py) in C++: class-conditional DiT
// denoising with classifier-free guidance, then the VAE decoder.
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "models/dit_config.h"
#include "models/dit_embeddings.h"
#include "models/dit_gen.h"
#include "models/dit_transformer.h"
#include "models/dit_weights.h"
#include "models/model_index.h"
#include "models/vae_decoder.h"
#include "runtime/error.h"
#include "runtime/json_config.h"
#include "runtime/png.h"
#include "runtime/randn.h"
#include "runtime/safetensors.h"
#include "samplers/sampler.h"
#include "samplers/scheduler_config.h"

namespace dit {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string fmt_num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

struct Pipeline::Impl {
  ModelIndex index;
  DiTConfig tcfg;
  VaeConfig vcfg;
  SchedulerConfig scfg;
  ModelInfo info;
  DType dtype = DType::F32;
  WeightStore tstore, vstore;
  DiTWeights weights;
  std::unique_ptr<VaeDecoder> vae;
  std::shared_ptr<StepExchange> ex;
  std::unique_ptr<SelfAttention> attn;
  std::unique_ptr<DiTTransformer> dit;

  // Per-shape state (rebuilt only when the batch or size changes).
  int64_t B = 0, K = 0, h = 0, w = 0;
  int64_t vae_h = 0, vae_w = 0;
  Tensor x, xs, x_in, local_out, full_out, eps, eps_both, guided;
  std::vector<double> tvec;
  std::vector<int64_t> yvec;

  // batch = model batch (items × branches); items = latents stepped by the samplers.
  void ensure_shape(int64_t batch, int64_t items, int64_t lh, int64_t lw) {
    if (batch == B && items == K && lh == h && lw == w) return;
    const int64_t C = tcfg.in_channels, p = tcfg.patch, gh = lh / p, gw = lw / p, N = gh * gw;
    const int64_t row = tcfg.patch_dim_out();
    TokenRange r = ex->token_range(N);
    DiTShape s;
    s.batch = batch;
    s.grid_h = gh;
    s.grid_w = gw;
    s.token_begin = r.begin;
    s.token_end = r.end;
    dit->prepare(s, attn.get());
    ex->prepare(batch, N, row, items * C * lh * lw);
    x = Tensor::empty({items, C, lh, lw});
    xs = Tensor::empty({items, C, lh, lw});
    x_in = Tensor::empty({batch, C, lh, lw});
    local_out = Tensor::empty({batch, r.size(), row});
    full_out = Tensor::empty({batch, N, row});
    eps = Tensor::empty({batch, C, lh, lw});
    eps_both = Tensor::empty({2 * items, C, lh, lw});
    guided = Tensor::empty({items, C, lh, lw});
    tvec.assign(batch, 0.0);
    yvec.assign(batch, 0);
    B = batch;
    K = items;
    h = lh;
    w = lw;
  }
};

Pipeline::Pipeline() : impl_(std::make_unique<Impl>()) {}
Pipeline::~Pipeline() = default;
const ModelInfo& Pipeline::info() const { return impl_->info; }
StepExchange& Pipeline::exchange() { return *impl_->ex; }

std::unique_ptr<Pipeline> Pipeline::load(const PipelineOptions& opt) {
  std::unique_ptr<Pipeline> p(new Pipeline());
  Impl& m = *p->impl_;
  const std::string& dir = opt.model_dir;
  m.index = ModelIndex::load(dir);
  m.tcfg = dit_config_from(Config::load(dir + "/transformer/config.json"));
  m.vcfg = vae_config_from(Config::load(dir + "/vae/config.json"));
  m.scfg = scheduler_config_from(Config::load(dir + "/scheduler/scheduler_config.json"));
  DIT_CHECK(m.vcfg.latent_channels == m.tcfg.in_channels,
            dir << ": the VAE has " << m.vcfg.latent_channels << " latent channels but the transformer takes "
                << m.tcfg.in_channels);
  m.dtype = opt.dtype;
  m.tstore = WeightStore::open_dir(dir + "/transformer");
  m.weights = DiTWeights::load(m.tcfg, m.tstore, opt.dtype, opt.qkv);
  m.vstore = WeightStore::open_dir(dir + "/vae");
  m.vae = std::make_unique<VaeDecoder>(m.vcfg, m.vstore);
  m.ex = opt.exchange ? opt.exchange : std::shared_ptr<StepExchange>(make_serial_exchange());
  m.attn = m.ex->make_attention();
  m.dit = std::make_unique<DiTTransformer>(m.weights);

  ModelInfo& i = m.info;
  i.dir = dir;
  i.name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (i.name.empty() || i.name == ".") i.name = std::filesystem::absolute(dir).lexically_normal().parent_path().filename().string();
  i.vae_scale = m.vcfg.scale();
  i.default_width = i.default_height = m.tcfg.sample_size * i.vae_scale;
  i.size_multiple = i.vae_scale * m.tcfg.patch;
  i.num_classes = m.tcfg.num_classes;
  i.heads = m.tcfg.heads;
  i.hidden = m.tcfg.hidden();
  i.layers = m.tcfg.layers;
  i.default_sampler = sampler_name_for_class(m.scfg.class_name);
  return p;
}

Result Pipeline::generate(const Request& req, const ProgressFn& progress) {
  return std::move(generate_batch({req}, progress).front());
}

namespace {

struct Validated {
  int W = 0, H = 0;
  ClassChoice cls;
};

}  // namespace

std::vector<Result> Pipeline::generate_batch(const std::vector<Request>& reqs, const ProgressFn& progress) {
  Impl& m = *impl_;
  const auto t_start = Clock::now();
  const ModelInfo& info = m.info;
  DIT_CHECK(!reqs.empty(), "generate_batch: no requests");
  const int64_t k = int64_t(reqs.size());
  const int branch = m.ex->cfg_branch();

  // Validate every request; a micro-batch shares size, steps, sampler and whether CFG is on.
  std::vector<Validated> v(reqs.size());
  for (size_t j = 0; j < reqs.size(); ++j) {
    const Request& req = reqs[j];
    const int W = req.width ? req.width : info.default_width, H = req.height ? req.height : info.default_height;
    DIT_CHECK(W > 0 && H > 0 && W % info.size_multiple == 0 && H % info.size_multiple == 0,
              "size " << W << "x" << H << " is not allowed: width and height must be positive multiples of "
                      << info.size_multiple << " (VAE scale " << info.vae_scale << " × patch " << m.tcfg.patch << ")");
    DIT_CHECK(int64_t(W) * H <= int64_t(16384) * 16384, "size " << W << "x" << H << " is too large");
    DIT_CHECK(req.steps >= 1 && req.steps <= 1000, "steps must be in 1..1000, got " << req.steps);
    DIT_CHECK(std::isfinite(req.guidance_scale), "guidance scale must be a finite number");
    DIT_CHECK(req.negative_prompt.empty(),
              "--negative-prompt is not supported by class-conditional DiT models (the unconditional branch is the "
              "null class)");
    DIT_CHECK(req.guidance_scale > 1.0 || branch == -1,
              "--cfg-parallel needs classifier-free guidance, but the guidance scale is "
                  << req.guidance_scale << " (<= 1 runs one branch only)");
    v[j] = {W, H, resolve_class(m.index, req.prompt, m.tcfg.num_classes)};
    if (j > 0) {
      DIT_CHECK(W == v[0].W && H == v[0].H && req.steps == reqs[0].steps && req.sampler == reqs[0].sampler &&
                    (req.guidance_scale > 1.0) == (reqs[0].guidance_scale > 1.0) && req.decode == reqs[0].decode,
                "generate_batch: requests of one micro-batch must share size, steps, sampler, decoding and "
                "whether guidance is on");
    }
  }
  const int W = v[0].W, H = v[0].H, steps = reqs[0].steps;
  const bool use_cfg = reqs[0].guidance_scale > 1.0;

  // One sampler per item (each keeps its own multistep state).
  SchedulerConfig sc = reqs[0].sampler.empty() ? m.scfg : with_sampler(m.scfg, reqs[0].sampler);
  std::vector<std::unique_ptr<Sampler>> samplers;
  const int64_t lh = H / info.vae_scale, lw = W / info.vae_scale;
  const int64_t C = m.tcfg.in_channels, n = C * lh * lw;
  for (int64_t j = 0; j < k; ++j) {
    samplers.push_back(make_sampler(sc));
    samplers.back()->set_timesteps(steps);
    samplers.back()->prepare(n);
  }
  const std::vector<double>& ts = samplers[0]->timesteps();

  // Batch layout: [cond_0 .. cond_{k-1}, uncond_0 .. uncond_{k-1}] (diffusers' [cond, uncond]
  // for k = 1), or one branch of k items under CFG parallel or without guidance.
  const int64_t branches = (use_cfg && branch == -1) ? 2 : 1;
  const int64_t batch = branches * k;
  m.ensure_shape(batch, k, lh, lw);
  const int null_id = m.tcfg.null_class();
  for (int64_t j = 0; j < k; ++j) {
    if (!use_cfg) {
      m.yvec[j] = v[j].cls.id;
    } else if (branch == -1) {
      m.yvec[j] = v[j].cls.id;
      m.yvec[k + j] = null_id;
    } else {
      m.yvec[j] = branch == 0 ? v[j].cls.id : null_id;
    }
  }

  std::vector<Result> res(reqs.size());
  for (int64_t j = 0; j < k; ++j) {
    res[j].eps0 = Tensor::empty({1, C, lh, lw});
    Tensor noise = torch_randn(reqs[j].seed, {1, C, lh, lw});
    const float sigma0 = samplers[j]->init_noise_sigma();
    float* x = m.x.f32() + j * n;
    for (int64_t e = 0; e < n; ++e) x[e] = noise.f32()[e] * sigma0;
  }

  const auto t_loop = Clock::now();
  for (int i = 0; i < int(ts.size()); ++i) {
    const auto t_step = Clock::now();
    for (int64_t j = 0; j < k; ++j) samplers[j]->scale_model_input(m.x.f32() + j * n, m.xs.f32() + j * n, n, i);
    for (int64_t b = 0; b < batch; ++b) {
      std::memcpy(m.x_in.f32() + b * n, m.xs.f32() + (b % k) * n, n * 4);
      m.tvec[b] = ts[i];
    }
    m.dit->forward(m.x_in.f32(), m.tvec.data(), m.yvec.data(), m.local_out.f32());  // [B, T_local, p·p·C_out]
    m.ex->gather_tokens(m.local_out.f32(), m.full_out.f32());                      // [B, N, p·p·C_out]
    unpatchify(m.full_out.f32(), batch, lh / m.tcfg.patch, lw / m.tcfg.patch, m.tcfg.patch, m.tcfg.out_channels, C,
               m.eps.f32());                                                       // [B, C, h, w] (learned sigma dropped)
    const float* both = m.eps.f32();  // [cond × k, uncond × k] when guided
    if (use_cfg && branch != -1) {
      m.ex->exchange_cfg(m.eps.f32(), m.eps_both.f32());
      both = m.eps_both.f32();
    }
    for (int64_t j = 0; j < k; ++j) {
      const float* eps = m.eps.f32() + j * n;
      if (use_cfg) {
        const float g = float(reqs[j].guidance_scale);
        const float *cond = both + j * n, *unc = both + (k + j) * n;
        float* gd = m.guided.f32() + j * n;
        for (int64_t e = 0; e < n; ++e) gd[e] = unc[e] + g * (cond[e] - unc[e]);  // uncond + g·(cond − uncond)
        eps = gd;
      }
      if (i == 0) std::memcpy(res[j].eps0.f32(), eps, n * 4);
      samplers[j]->step(i, eps, m.x.f32() + j * n, n);
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
  m.ex->check_agreement(m.x.f32(), k * n);
  const double denoise = since(t_loop);

  for (int64_t j = 0; j < k; ++j) {
    Result& r = res[j];
    const Request& req = reqs[j];
    r.latents = Tensor::empty({1, C, lh, lw});
    std::memcpy(r.latents.f32(), m.x.f32() + j * n, n * 4);
    if (req.decode && m.ex->is_output_rank()) {
      if (m.vae_h != lh || m.vae_w != lw) {
        m.vae->prepare(1, lh, lw);
        m.vae_h = lh;
        m.vae_w = lw;
      }
      r.image = Tensor::empty({1, 3, H, W});
      m.vae->decode(r.latents.f32(), r.image.f32());
    }
    r.class_id = v[j].cls.id;
    r.label = v[j].cls.label;
    r.sampler = samplers[j]->name();
    r.width = W;
    r.height = H;
    r.steps = steps;
    r.guidance_scale = req.guidance_scale;
    r.seed = req.seed;
    r.denoise_seconds = denoise / double(k);
    std::ostringstream ps;
    ps << req.prompt << "\nSteps: " << steps << ", Sampler: " << r.sampler << ", CFG scale: " << fmt_num(req.guidance_scale)
       << ", Seed: " << req.seed << ", Size: " << W << "x" << H << ", Model: " << info.name << ", Class: " << r.class_id
       << (r.label.empty() ? "" : " (" + r.label + ")") << ", Dtype: " << dtype_name(m.dtype)
       << ", Version: dit-gen " << DIT_VERSION;
    r.parameters = ps.str();
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
