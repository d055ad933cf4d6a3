// VaeDecoder::prepare(): the decoder's steps for one latent shape, in the order decode_image()
// runs them, with their primitives and the buffers each reads and writes
// (models/vae/vae_decoder_impl.h).
#include <algorithm>
#include <string>

#include "models/vae/vae_decoder_impl.h"
#include "runtime/engine.h"
#include "runtime/environment.h"
#include "runtime/printable.h"

namespace dit {

namespace {

// DIT_VAE_WINOGRAD: unset or "on", Winograd as winograd_for() says; "off", every convolution
// direct; "all", bf16 by Winograd also where oneDNN has AMX (to measure the two there).
enum class WinogradMode { On, Off, All };

WinogradMode winograd_mode() {
  static const WinogradMode mode = [] {
    const char* v = env_nonempty("DIT_VAE_WINOGRAD");
    if (!v || std::string(v) == "on") return WinogradMode::On;
    if (std::string(v) == "all") return WinogradMode::All;
    DIT_CHECK(std::string(v) == "off", "DIT_VAE_WINOGRAD: '" << printable(v, 40) << "' (expected on, off or all)");
    return WinogradMode::Off;
  }();
  return mode;
}

}  // namespace

bool VaeDecoder::winograd_for(DType compute, bool weight_cache) {
  const WinogradMode mode = winograd_mode();
  if (!weight_cache || mode == WinogradMode::Off) return false;
  // bf16: F(2x2, 3x3) with bf16 products (runtime/conv2d_winograd_bf16.h), where oneDNN has no
  // AMX (with AMX its direct bf16 kernel is kept unless DIT_VAE_WINOGRAD=all: the two are not
  // yet measured against each other there; tools/scaling_bench.sh does).
  if (compute == DType::BF16) return (mode == WinogradMode::All || !amx_available()) && compute_supported(DType::BF16);
  return winograd_available();
}

bool VaeDecoder::Impl::by_winograd(const vae::ConvW& cw) const {
  return VaeDecoder::winograd_for(compute, bool(cw.packed)) && cw.in >= 16 && cw.out >= 16;
}

Conv2d VaeDecoder::Impl::conv(const vae::ConvW& cw, int64_t c_in, int64_t rows, int64_t width, bool accumulate,
                              DType input, bool nearest2x) {
  Conv2dSpec s;
  s.batch = 1;
  s.in_channels = c_in;
  s.out_channels = cw.out;
  s.kernel = cw.k;
  s.stride = 1;
  s.padding = cw.k / 2;
  const bool halo = cw.k == 3;
  DIT_CHECK(cw.k == 1 || cw.k == 3, "VAE: " << cw.k << "x" << cw.k << " convolutions are not supported");
  s.height = halo ? rows + 2 : rows;  // the halo rows are the padding above and below
  s.pad_rows = 0;
  s.width = width;
  s.accumulate = accumulate;
  s.nhwc = true;
  s.compute = compute;
  s.input = input;
  // Winograd as winograd_for says (at least 16 channels in and out, oneDNN's f32 kernel's
  // blocks: conv_in's 4 inputs and conv_out's 3 outputs stay direct, and are under 1% of the
  // work), where the weight has a packed entry: oneDNN's f32 transform into the Winograd layout
  // is slow (5.9 s for the SD VAE's weights on the 2-core VM), so it is made once per machine,
  // not at every preparation, and the bf16 form's weights (16/9 of the weight's bf16 size) are
  // mapped by every rank instead of copied (--weight-cache off: direct).
  s.winograd = halo && by_winograd(cw);
  s.nearest2x_input = nearest2x;
  s.winograd_row_source = s.winograd && !nearest2x;  // its input's transform made piece by piece (run_rows)
  s.image_row = band.begin * (width / w0);  // the band's first row at this resolution (its tiles' grid)
  return Conv2d(s, cw.w, cw.b, conv_ws, cw.packed);
}

GroupNormSpec VaeDecoder::Impl::gn(int64_t c, int64_t rows, int64_t width, int64_t image_rows, bool silu_after,
                                   DType out) {
  GroupNormSpec s;
  s.batch = 1;
  s.channels = c;
  s.height = rows;
  s.width = width;
  s.groups = groups;
  s.eps = 1e-6f;
  s.silu = silu_after;
  s.out = out;
  s.split = split;
  s.image_height = image_rows;
  return s;
}

VaeDecoder::Impl::ResnetOps VaeDecoder::Impl::resnet_ops(const vae::ResnetW& r, int64_t rows, int64_t width,
                                                         int64_t image_rows, BufferPlan& plan, int x) {
  ResnetOps o;
  o.w = &r;
  o.n1 = gn(r.c1.in, rows, width, image_rows, true, compute);
  o.c1 = conv(r.c1, r.c1.in, rows, width, false, compute);
  o.n2 = gn(r.c1.out, rows, width, image_rows, true, compute);
  o.c2 = conv(r.c2, r.c2.in, rows, width, true, compute);
  // A shortcut that narrows the channels writes its output over x (shortcut_over_x).
  const bool over_x = r.has_shortcut && r.shortcut.out <= r.shortcut.in;
  if (over_x) {
    const int64_t px = shortcut_piece_pixels > 0 ? shortcut_piece_pixels : kShortcutPiecePixels;
    o.sc_rows = std::min(rows, std::max<int64_t>(1, px / width));
    o.sc = conv(r.shortcut, r.shortcut.in, o.sc_rows, width, false, DType::F32);
    if (rows % o.sc_rows) o.sc_tail = conv(r.shortcut, r.shortcut.in, rows % o.sc_rows, width, false, DType::F32);
  } else if (r.has_shortcut) {
    o.sc = conv(r.shortcut, r.shortcut.in, rows, width, false, DType::F32);
  }
  o.x = x;
  o.a = o.c1.uses_winograd() ? -1 : plan.take(act_bytes(r.c1.in, rows, width, compute));
  o.h = plan.take(act_bytes(r.c1.out, rows, width, DType::F32));
  if (o.a >= 0) plan.release(o.a);
  o.g = o.c2.uses_winograd() ? -1 : plan.take(act_bytes(r.c1.out, rows, width, compute));
  if (o.g >= 0) plan.release(o.h);  // h is not needed once normalised
  if (r.has_shortcut && !over_x) {
    o.out = plan.take(act_bytes(r.c1.out, rows, width, DType::F32));
    plan.release(o.x);
  } else {
    o.out = o.x;
  }
  plan.release(o.g >= 0 ? o.g : o.h);
  return o;
}

void VaeDecoder::Impl::plan_attention(int64_t c, int64_t rows, int64_t width, int64_t image_rows, BufferPlan& plan,
                                      int x) {
  AttnOps& a = attn_ops;
  const int64_t band_px = rows * width, image_px = image_rows * width;
  a.c = c;
  a.tokens = band_px;
  a.gn = gn(c, rows, width, image_rows, false, DType::F32);
  a.x = x;
  a.a = plan.take(act_bytes(c, rows, width, DType::F32));
  plan.release(a.a);
  LinearSpec ls;
  ls.batch = 1;
  ls.rows = band_px;
  ls.in = c;
  ls.out = 3 * c;
  a.qkv = Linear(ls, mid_attn.qkv);
  ls.out = c;
  a.out = Linear(ls, mid_attn.out);
  // One head; the band's pixels attend to every pixel of the image.
  AttentionSpec as;
  as.batch = 1;
  as.heads = 1;
  as.q_len = band_px;
  as.kv_len = image_px;
  as.head_dim = c;
  as.q = AttnLayout::bthd(band_px, c, 1, 3 * c);
  as.k = as.v = AttnLayout::bthd(image_px, c, 1, 3 * c);
  as.out = AttnLayout::bthd(band_px, c, 1, c);
  as.compute = compute;
  a.attn = Attention(as);
  a.counts.clear();
  for (const TokenRange& r : split_all(image_rows, split->parts()))
    a.counts.push_back(size_t(r.size() * width * 3 * c));
  a.q_offset = band.begin * width * 3 * c;
  qkv_all = Tensor::empty({image_px, 3 * c});
  // One part: the band is the image, and its Q, K, V are the gathered ones (no copy; at
  // 1024 x 1024 100 MB less).
  qkv_band = split->parts() == 1 ? qkv_all : Tensor::empty({band_px, 3 * c});
  attn_buf = Tensor::empty({band_px, c});
}

VaeDecoder::Impl::UpsampleOps VaeDecoder::Impl::upsample_ops(const vae::ConvW& cw, int64_t rows, int64_t width,
                                                             BufferPlan& plan, int x) {
  UpsampleOps u;
  u.c = cw.in;
  u.rows = rows;
  u.width = width;
  // bf16 by Winograd: the upsampled input's convolution as four phases of a 2x2 one over x
  // (2.25 products per output instead of 4, runtime/conv2d_winograd_bf16.h).
  u.of_x = compute == DType::BF16 && by_winograd(cw);
  u.conv = u.of_x ? conv(cw, cw.in, rows, width, false, DType::F32, true)
                  : conv(cw, cw.in, 2 * rows, 2 * width, false, compute);
  u.x = x;
  u.u = u.conv.uses_winograd() ? -1 : plan.take(act_bytes(u.c, 2 * rows, 2 * width, compute));
  if (u.u >= 0) plan.release(u.x);
  u.y = plan.take(act_bytes(cw.out, 2 * rows, 2 * width, DType::F32));
  plan.release(u.u >= 0 ? u.u : u.x);
  return u;
}

void VaeDecoder::Impl::allocate(const BufferPlan& plan, int64_t lat, int64_t image_rows, int64_t image_width,
                                int out_channels) {
  for (int i = 0; i < kBuffers; ++i)
    buf[i] = plan.bytes[i] > 0 ? Tensor::empty({int64_t(plan.bytes[i] + 3) / 4}) : Tensor();
  int64_t sc_floats = 0;  // the largest piece of a shortcut written over x
  for (const ResnetOps& o : resnets) {
    if (o.sc_rows == 0) continue;  // no shortcut written over x (o.sc may be empty)
    const Conv2dSpec& s = o.sc.spec();
    sc_floats = std::max(sc_floats, s.height * s.width * s.out_channels);
  }
  sc_piece = sc_floats > 0 ? Tensor::empty({sc_floats}) : Tensor();
  z = Tensor::empty({band.size() + 2, w0, lat});
  out_rows = Tensor::empty({image_rows, image_width, int64_t(out_channels)});
  resident = false;
}

void VaeDecoder::set_shortcut_piece_pixels(int64_t pixels) {
  DIT_CHECK(pixels >= 0, "VAE: shortcut pieces of " << pixels << " pixels");
  impl_->shortcut_piece_pixels = pixels;
}

void VaeDecoder::prepare(int64_t batch, int64_t h, int64_t w, RowSplit* split) {
  Impl& m = *impl_;
  DIT_CHECK(batch >= 1 && h >= 1 && w >= 1, "VAE: empty latent shape");
  if (!split) {
    if (!m.serial_split) m.serial_split = make_serial_row_split();
    split = m.serial_split.get();
  }
  DIT_CHECK(h >= split->parts(), "VAE: a latent of " << h << " rows cannot be split over " << split->parts()
                                                    << " ranks (each decodes at least one row)");
  m.split = split;
  m.batch = batch;
  m.conv_ws = std::make_shared<Conv2dWorkspace>();  // sized by the convolutions built below
  m.h0 = h;
  m.w0 = w;
  m.band = split->range(h);
  const std::vector<int>& C = cfg_.block_out_channels;
  const int64_t top = C.back(), lat = cfg_.latent_channels, rows = m.band.size();
  Impl::BufferPlan plan;  // the steps in the order decode_image() runs them
  const DType f32 = DType::F32;

  if (m.has_post_quant) {
    m.post_quant_op = m.conv(m.post_quant, lat, rows, w, false, f32);
    m.pq_buf = plan.take(Impl::act_bytes(lat, rows, w, f32));
  }
  m.conv_in_op = m.conv(m.conv_in, lat, rows, w, false, f32);
  m.in_buf = plan.take(Impl::act_bytes(top, rows, w, f32));
  if (m.has_post_quant) plan.release(m.pq_buf);
  int cur = m.in_buf;
  m.resnets.clear();
  m.upsamplers.clear();
  m.resnets.push_back(m.resnet_ops(m.mid0, rows, w, h, plan, cur));
  cur = m.resnets.back().out;
  if (m.has_attn) m.plan_attention(top, rows, w, h, plan, cur);
  m.resnets.push_back(m.resnet_ops(m.mid1, rows, w, h, plan, cur));
  cur = m.resnets.back().out;
  int64_t rr = rows, ww = w, hh = h;  // the band's rows, and the image's width and rows, per block
  for (const vae::UpBlockW& ub : m.ups) {
    for (const vae::ResnetW& r : ub.resnets) {
      m.resnets.push_back(m.resnet_ops(r, rr, ww, hh, plan, cur));
      cur = m.resnets.back().out;
    }
    if (ub.has_upsampler) {
      m.upsamplers.push_back(m.upsample_ops(ub.upsampler, rr, ww, plan, cur));
      cur = m.upsamplers.back().y;
      rr *= 2;
      ww *= 2;
      hh *= 2;
    }
  }
  m.norm_out_spec = m.gn(C[0], rr, ww, hh, true, m.compute);
  m.conv_out_op = m.conv(m.conv_out, C[0], rr, ww, false, m.compute);
  m.last_buf = cur;
  m.norm_out_buf = plan.take(Impl::act_bytes(C[0], rr, ww, m.compute));
  plan.release(cur);
  m.out_buf = plan.take(Impl::act_bytes(cfg_.out_channels, rr, ww, f32));
  m.image_counts.clear();
  const int64_t s = cfg_.scale();
  for (const TokenRange& r : split_all(h, split->parts()))
    m.image_counts.push_back(size_t(r.size() * s * ww * cfg_.out_channels));
  m.allocate(plan, lat, hh, ww, cfg_.out_channels);
}

}  // namespace dit
