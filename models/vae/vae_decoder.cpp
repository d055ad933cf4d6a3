// VaeDecoder: the weights loaded (models/vae/vae_weights.h) and the prepared plan run
// (models/vae/vae_decoder_impl.h; the plan itself in vae_decoder_plan.cpp).
#include "models/vae/vae_decoder.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "models/vae/vae_decoder_impl.h"
#include "runtime/elementwise.h"
#include "runtime/engine.h"
#include "runtime/prefault.h"
#include "runtime/safetensors.h"

namespace dit {

using vae::load_attn;
using vae::load_conv;
using vae::load_norm;
using vae::load_resnet;

VaeDecoder::VaeDecoder(const VaeConfig& cfg, const WeightStore& s, DType compute)
    : cfg_(cfg), impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  require_compute(compute);
  m.compute = compute;
  m.groups = cfg.groups;
  const std::vector<int>& C = cfg.block_out_channels;
  const int64_t top = C.back(), lat = cfg.latent_channels;
  m.has_post_quant = cfg.use_post_quant_conv;
  if (m.has_post_quant) m.post_quant = load_conv(s, "post_quant_conv", lat, lat, 1, compute);
  m.conv_in = load_conv(s, "decoder.conv_in", top, lat, 3, compute);
  m.mid0 = load_resnet(s, "decoder.mid_block.resnets.0", top, top, compute);
  m.has_attn = cfg.mid_block_add_attention;
  if (m.has_attn) m.mid_attn = load_attn(s, "decoder.mid_block.attentions.0.", top, compute);
  m.mid1 = load_resnet(s, "decoder.mid_block.resnets.1", top, top, compute);
  int64_t prev = top;
  const int nb = int(C.size());
  for (int bi = 0; bi < nb; ++bi) {
    const int64_t co = C[nb - 1 - bi];
    vae::UpBlockW ub;
    for (int r = 0; r <= cfg.layers_per_block; ++r) {
      const std::string name = "decoder.up_blocks." + std::to_string(bi) + ".resnets." + std::to_string(r);
      ub.resnets.push_back(load_resnet(s, name, r == 0 ? prev : co, co, compute));
    }
    ub.has_upsampler = bi != nb - 1;
    if (ub.has_upsampler)
      ub.upsampler = load_conv(s, "decoder.up_blocks." + std::to_string(bi) + ".upsamplers.0.conv", co, co, 3, compute);
    m.ups.push_back(std::move(ub));
    prev = co;
  }
  m.norm_out = load_norm(s, "decoder.conv_norm_out", C[0]);
  m.conv_out = load_conv(s, "decoder.conv_out", cfg.out_channels, C[0], 3, compute);
}

VaeDecoder::~VaeDecoder() = default;

int VaeDecoder::winograd_convolutions() const {
  const Impl& m = *impl_;
  int n = 0;
  auto count = [&](const Conv2d& c) { n += c.uses_winograd() ? 1 : 0; };
  for (const Impl::ResnetOps& r : m.resnets) {
    count(r.c1);
    count(r.c2);
  }
  for (const Impl::UpsampleOps& u : m.upsamplers) count(u.conv);
  count(m.conv_in_op);
  count(m.conv_out_op);
  return n;
}

size_t VaeDecoder::activation_bytes() const {
  size_t n = 0;
  for (const Tensor& b : impl_->buf) n += b.defined() ? b.nbytes() : 0;
  return n;
}

void VaeDecoder::decode(const float* latents, float* image) {
  decode_raw(latents, image);
  to_unit_range(image, impl_->batch * cfg_.out_channels * impl_->h0 * cfg_.scale() * impl_->w0 * cfg_.scale());
}

void to_unit_range(float* image, int64_t n) {
  for (int64_t i = 0; i < n; ++i) image[i] = std::min(1.0f, std::max(0.0f, image[i] / 2 + 0.5f));
}

void VaeDecoder::decode_raw(const float* latents, float* image) {
  Impl& m = *impl_;
  if (!m.resident) m.fault_in();
  const int64_t lat = cfg_.latent_channels, s = cfg_.scale();
  for (int64_t n = 0; n < m.batch; ++n)
    m.decode_image(cfg_, latents + n * lat * m.h0 * m.w0, image + n * cfg_.out_channels * m.h0 * s * m.w0 * s);
}

void VaeDecoder::Impl::decode_image(const VaeConfig& cfg, const float* latents, float* image) {
  const int64_t lat = cfg.latent_channels, hw = h0 * w0, rows = band.size();
  // z = latents / scaling_factor (+ shift_factor), the band's rows, [C, h, w] -> [rows, w, C]
  const float inv = float(1.0 / cfg.scaling_factor), shift = float(cfg.shift_factor.value_or(0.0));
  float* zr = z.f32() + w0 * lat;  // after the halo row
  for (int64_t c = 0; c < lat; ++c)
    for (int64_t i = 0; i < rows * w0; ++i) zr[i * lat + c] = latents[c * hw + band.begin * w0 + i] * inv + shift;
  if (has_post_quant) {
    run_on(post_quant_op, z.data(), pq_buf);  // 1×1: the band's rows only
    run(conv_in_op, pq_buf, in_buf);
  } else {
    run_on(conv_in_op, z.data(), in_buf);
  }
  size_t ri = 0;
  run_resnet(resnets[ri++]);
  if (has_attn) run_attention();
  run_resnet(resnets[ri++]);
  size_t ui = 0;
  for (const vae::UpBlockW& ub : ups) {
    for (size_t r = 0; r < ub.resnets.size(); ++r) run_resnet(resnets[ri++]);
    if (ub.has_upsampler) run_upsampler(upsamplers[ui++]);
  }
  norm(norm_out_spec, norm_out, last_buf, norm_out_buf);
  run(conv_out_op, norm_out_buf, out_buf);  // [rows·s, W, 3]
  const int64_t ww = norm_out_spec.width;
  const int64_t oc = cfg.out_channels;
  split->gather(f32_rows(out_buf, ww * oc), out_rows.f32(), image_counts);  // [H, W, 3]
  const int64_t ohw = out_rows.dim(0) * ww;
  for (int64_t c = 0; c < oc; ++c)  // -> [3, H, W]
    for (int64_t i = 0; i < ohw; ++i) image[c * ohw + i] = out_rows.f32()[i * oc + c];
}

void VaeDecoder::Impl::run_on(const Conv2d& c, void* band, int out) {
  const Conv2dSpec& s = c.spec();
  const bool halo = s.kernel > 1;
  const int64_t rows = halo ? s.height - 2 : s.height;
  const size_t row_bytes = size_t(s.width * s.in_channels) * dtype_size(s.input);
  if (halo) split->exchange_halo(band, rows, row_bytes);
  const void* x = halo ? band : static_cast<const char*>(band) + row_bytes;
  float* y = f32_rows(out, s.out_width() * s.out_channels);
  if (s.input == DType::BF16)
    c.run(static_cast<const uint16_t*>(x), y);
  else
    c.run(static_cast<const float*>(x), y);
}

void VaeDecoder::Impl::run_rows(const Conv2d& c, const RowSource& src, int in, int64_t rows, int64_t width,
                                int64_t in_c, int out) {
  split->exchange_halo(buf[in].data(), rows, size_t(width * in_c) * sizeof(float));
  c.run_rows(src, f32_rows(out, c.spec().width * c.spec().out_channels));
}

void VaeDecoder::Impl::norm(const GroupNormSpec& s, const vae::NormW& w, int in, int out) {
  const int64_t row = s.width * s.channels;
  group_norm(s, f32_rows(in, row), rows_of(out, row, s.out), w.gamma.f32(), w.beta.f32());
}

void VaeDecoder::Impl::norm_conv_rows(const GroupNormSpec& n, const vae::NormW& nw, GroupNormAffine& f,
                                      const Conv2d& c, int in, int y) {
  group_norm_stats(n, f32_rows(in, n.width * n.channels), nw.gamma.f32(), nw.beta.f32(), f);
  const GroupNormRows src(n, f, buf[in].f32(), top_edge(), bottom_edge());
  run_rows(c, src, in, n.height, n.width, n.channels, y);
}

void VaeDecoder::Impl::run_resnet(ResnetOps& o) {
  const vae::ResnetW& r = *o.w;
  if (o.a >= 0) {
    norm(o.n1, r.n1, o.x, o.a);  // SiLU(GN(x))
    run(o.c1, o.a, o.h);         // h = conv1(.)
  } else {
    norm_conv_rows(o.n1, r.n1, o.f1, o.c1, o.x, o.h);
  }
  // SiLU(GN(h)) into its buffer before the shortcut, which may take h's (free from then on).
  if (o.g >= 0) norm(o.n2, r.n2, o.h, o.g);
  if (o.sc_rows > 0)
    shortcut_over_x(o);
  else if (r.has_shortcut)
    run(o.sc, o.x, o.out);  // shortcut(x)
  if (o.g >= 0)
    run(o.c2, o.g, o.out);  // += conv2(.)
  else
    norm_conv_rows(o.n2, r.n2, o.f2, o.c2, o.h, o.out);
}

// x's buffer = shortcut(x), one piece of rows after another: each piece's output rows go to
// sc_piece, then over x. With as many channels out as in or fewer, output rows [a, b) lie
// over x's rows before b (the halo row above included), which this piece and the ones
// before it have read: x's rows from b on are untouched until their piece reads them. The
// resnet then needs x's buffer and conv1's output, not a third for the shortcut's (the SD
// VAE's last up block: 256 + 128 channels of full-resolution rows instead of 256 + 128 + 128).
void VaeDecoder::Impl::shortcut_over_x(const ResnetOps& o) {
  const Conv2dSpec& s = o.sc.spec();
  const int64_t rows = o.n1.height, in_row = s.width * s.in_channels, out_row = s.width * s.out_channels;
  const float* x = f32_rows(o.x, in_row);
  float* y = f32_rows(o.x, out_row);
  for (int64_t a = 0; a < rows; a += o.sc_rows) {
    const int64_t n = std::min(o.sc_rows, rows - a);
    (n == o.sc_rows ? o.sc : o.sc_tail).run(x + a * in_row, sc_piece.f32());
    std::memcpy(y + a * out_row, sc_piece.f32(), size_t(n * out_row) * sizeof(float));
  }
}

// x += out(attention(GN(x))): a single head; the band's pixels attend to every pixel.
void VaeDecoder::Impl::run_attention() {
  AttnOps& o = attn_ops;
  const int cur = o.x, a = o.a;
  norm(o.gn, mid_attn.gn, cur, a);                          // tokens [band, C]
  o.qkv.run(f32_rows(a, o.c * w0), qkv_band.f32());         // [band, 3C]
  split->gather(qkv_band.f32(), qkv_all.f32(), o.counts);   // [H·W, 3C]
  const float* all = qkv_all.f32();
  o.attn.run(all + o.q_offset, all + o.c, all + 2 * o.c, attn_buf.f32(), nullptr);  // [band, C]
  float* x = f32_rows(cur, o.c * w0);
  float* y = f32_rows(a, o.c * w0);
  o.out.run(attn_buf.f32(), y);  // [band, C]
  add(x, y, x, o.tokens * o.c);
}

// y = conv(nearest2x(x)): by the phases over x itself (of_x), over the upsampled band written
// whole (u >= 0), or over its rows made piece by piece.
void VaeDecoder::Impl::run_upsampler(const UpsampleOps& u) {
  if (u.of_x) {
    run(u.conv, u.x, u.y);
  } else if (u.u >= 0) {
    upsample_nearest2x(f32_rows(u.x, u.width * u.c), rows_of(u.u, 2 * u.width * u.c, compute), compute, 1, u.rows,
                       u.width, u.c);
    run(u.conv, u.u, u.y);
  } else {
    const UpsampledRows src(buf[u.x].f32(), u.rows, u.width, u.c, top_edge(), bottom_edge());
    run_rows(u.conv, src, u.x, u.rows, u.width, u.c, u.y);
  }
}

// The first decode's buffers made resident by all of its threads at once (runtime/
// prefault.h): left to the first writes, the growing activations' new pages fall to the
// last thread of each loop, which zeroes them while the others wait.
void VaeDecoder::Impl::fault_in() {
  for (Tensor* t : {&buf[0], &buf[1], &buf[2], &z, &out_rows, &qkv_band, &qkv_all, &attn_buf, &sc_piece})
    if (t->defined()) prefault(t->data(), t->nbytes());
  conv_ws->prefault();
  resident = true;
}

}  // namespace dit
