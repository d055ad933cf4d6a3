#include "models/vae/vae_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "models/vae/vae_weights.h"
#include "runtime/elementwise.h"
#include "runtime/engine.h"
#include "runtime/environment.h"
#include "runtime/error.h"
#include "runtime/group_norm.h"
#include "runtime/prefault.h"
#include "runtime/row_sources.h"
#include "runtime/row_split.h"
#include "runtime/safetensors.h"

namespace dit {

namespace {

using vae::AttnW;
using vae::ConvW;
using vae::NormW;
using vae::ResnetW;
using vae::UpBlockW;
using vae::load_attn;
using vae::load_conv;
using vae::load_norm;
using vae::load_resnet;

// DIT_VAE_WINOGRAD=off: every convolution direct (to compare; on by default).
bool winograd_wanted() {
  static const bool on = [] {
    const char* v = env_nonempty("DIT_VAE_WINOGRAD");
    if (!v || std::string(v) == "on") return true;
    DIT_CHECK(std::string(v) == "off", "DIT_VAE_WINOGRAD: '" << v << "' (expected on or off)");
    return false;
  }();
  return on;
}

}  // namespace

// Activations are channels last, [H, W, C] per image, from the first convolution to the last:
// the convolutions read and write them in place (no layout reorders), GroupNorm and the
// upsampler write the next convolution's input type (bf16 with bf16 compute), and the mid
// block's attention reads the normalised activations as its tokens [H·W, C] directly.
//
// Each image is decoded as a band of its rows (all of them serially; one band per rank under
// --vae-parallel, runtime/row_split.h). Every buffer holds a band with one halo row above and
// below, [rows + 2, W, C]: a 3×3 convolution reads the band with its halo rows (its
// neighbours' rows, or zeros at the image's edges: padding only in W), everything else reads
// and writes the rows in between. GroupNorm's statistics and the attention's K/V cover the
// whole image.
struct VaeDecoder::Impl {
  // Weights.
  bool has_post_quant = false;
  ConvW post_quant, conv_in, conv_out;
  ResnetW mid0, mid1;
  bool has_attn = false;
  AttnW mid_attn;
  std::vector<UpBlockW> ups;
  NormW norm_out;
  int groups = 32;
  // The convolutions' and the attention's matmuls, and the type GroupNorm and the upsampler
  // write a convolution's input in.
  DType compute = DType::F32;

  // Plan for one shape: a list of steps executed in order over three rotating buffers.
  int64_t batch = 0, h0 = 0, w0 = 0;
  RowSplit* split = nullptr;
  std::unique_ptr<RowSplit> serial_split;
  TokenRange band;  // the latent rows decoded here
  static constexpr int kBuffers = 3;
  // The activations' buffers: which one each step reads and writes is chosen when the decoder
  // is prepared (BufferPlan), and each is sized for the largest activation it is given.
  Tensor buf[kBuffers];
  // Buffers handed out in the order the steps run: take() gives the free buffer that is
  // already the largest (growing it to the request), release() frees one for the next
  // step. With the SD VAE the last block's activations at full resolution then hold 256, 256
  // and 128 channels (direct), or 256 and 128 (Winograd, which reads SiLU(GN(.)) piece by
  // piece, and the shortcut written over x), where buffers sized for the largest activation
  // held 3 x 256 (at 1024 x 1024: 1.6 instead of 3.2 GB). An unused buffer is not allocated.
  struct BufferPlan {
    size_t bytes[kBuffers] = {};
    bool live[kBuffers] = {};
    int take(size_t b) {
      int best = -1;
      for (int i = 0; i < kBuffers; ++i)
        if (!live[i] && (best < 0 || bytes[i] > bytes[best])) best = i;
      DIT_CHECK(best >= 0, "VAE: more than " << kBuffers << " activations live at once (a decoder plan bug)");
      live[best] = true;
      bytes[best] = std::max(bytes[best], b);
      return best;
    }
    void release(int i) { live[i] = false; }
  };
  // Bytes of a band's activation with its halo rows, [rows + 2, width, c] of type t.
  static size_t act_bytes(int64_t c, int64_t rows, int64_t width, DType t) {
    return size_t((rows + 2) * width * c) * dtype_size(t);
  }
  Tensor z;         // scaled latents of the band, channels last, with halo rows
  Tensor out_rows;  // the whole image [H, W, 3] (every band gathered)
  struct ResnetOps {
    const ResnetW* w = nullptr;
    GroupNormSpec n1, n2;
    Conv2d c1, c2;
    // The shortcut (1x1): over the whole band, or, written over x (sc_rows > 0), over pieces of
    // sc_rows rows and a tail piece.
    Conv2d sc, sc_tail;
    int64_t sc_rows = 0;
    // Buffers: x, SiLU(GN(x)), h = conv1(.), SiLU(GN(h)), and the result (x's buffer without a
    // shortcut, and with one written over x). A convolution by Winograd reads its SiLU(GN(.))
    // piece by piece as it goes (runtime/row_sources.h): then that buffer is not used (-1).
    int x = 0, a = 0, h = 0, g = 0, out = 0;
    GroupNormAffine f1, f2;  // the statistics of those read piece by piece
  };
  // Output pixels of a piece of a shortcut written over its input (0: kShortcutPiecePixels).
  int64_t shortcut_piece_pixels = 0;
  static constexpr int64_t kShortcutPiecePixels = 4096;
  Tensor sc_piece;  // one piece of a shortcut's output, before it is copied over x
  struct AttnOps {
    GroupNormSpec gn;
    Linear qkv, out;
    Attention attn;
    int64_t c = 0, tokens = 0;           // the band's pixels
    std::vector<size_t> counts;          // qkv floats per part, for the gather
    int64_t q_offset = 0;                // the band's first row in the gathered qkv
    int x = 0, a = 0;                    // buffers: x (added to in place), the normalised tokens and out(.)
  };
  struct UpsampleOps {
    Conv2d conv;
    bool of_x = false;  // conv reads x and upsamples as it goes (Conv2dSpec::nearest2x_input)
    int64_t c = 0, rows = 0, width = 0;  // the input's channels and its band's rows and width
    int x = 0, u = 0, y = 0;             // buffers: x, nearest2x(x) (-1: made piece by piece), conv(.)
  };
  std::vector<ResnetOps> resnets;  // in execution order
  AttnOps attn_ops;
  std::vector<UpsampleOps> upsamplers;
  Conv2d post_quant_op, conv_in_op, conv_out_op;
  // Buffers: post_quant_conv's, conv_in's, the last up block's, norm_out's and conv_out's outputs.
  int pq_buf = 0, in_buf = 0, last_buf = 0, norm_out_buf = 0, out_buf = 0;
  GroupNormSpec norm_out_spec;
  std::vector<size_t> image_counts;  // output floats per part
  Tensor qkv_band, qkv_all, attn_buf;  // mid attention scratch
  std::shared_ptr<Conv2dWorkspace> conv_ws;  // one set of scratch buffers for all convolutions
  bool resident = false;  // whether the buffers' pages have been faulted in (first decode)

  // Buffer i's first row after the halo, when it holds rows of `row` elements of type t.
  void* rows_of(int i, int64_t row, DType t) { return static_cast<char*>(buf[i].data()) + row * int64_t(dtype_size(t)); }
  float* f32_rows(int i, int64_t row) { return static_cast<float*>(rows_of(i, row, DType::F32)); }

  // A convolution over a band of `rows` rows: a 3×3 one reads the band with its halo rows
  // (height rows + 2, no zero rows added), a 1×1 one the rows alone.
  // input: the type run() gets (F32 for the latents and the shortcut's x, compute after
  // GroupNorm or the upsampler); an f32 x with bf16 compute is converted inside the convolution.
  // Whether the 3x3 convolution `cw` runs by Winograd (at least 16 channels in and out).
  bool by_winograd(const ConvW& cw) const {
    return VaeDecoder::winograd_for(compute, bool(cw.packed)) && cw.in >= 16 && cw.out >= 16;
  }
  // nearest2x: the convolution of the band's nearest-2x upsampling, reading the band itself
  // (rows, width and the input type x's; the bf16 Winograd form only).
  Conv2d conv(const ConvW& cw, int64_t c_in, int64_t rows, int64_t width, bool accumulate, DType input,
              bool nearest2x = false) {
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
  // Runs c on the band at `band` (halo row first, in c's input type) into buffer `out`'s rows
  // (f32); a 3×3 convolution fetches the halo rows first.
  void run_on(const Conv2d& c, void* band, int out) {
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
  void run(const Conv2d& c, int in, int out) { run_on(c, buf[in].data(), out); }
  // c over the rows `src` makes from buffer `in` (f32, `in_c` channels, its halo rows fetched
  // first) into buffer `out`'s rows.
  void run_rows(const Conv2d& c, const RowSource& src, int in, int64_t rows, int64_t width, int64_t in_c, int out) {
    split->exchange_halo(buf[in].data(), rows, size_t(width * in_c) * sizeof(float));
    c.run_rows(src, f32_rows(out, c.spec().width * c.spec().out_channels));
  }
  bool top_edge() const { return band.begin == 0; }
  bool bottom_edge() const { return band.end == h0; }
  GroupNormSpec gn(int64_t c, int64_t rows, int64_t width, int64_t image_rows, bool silu_after, DType out) {
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
  void norm(const GroupNormSpec& s, const NormW& w, int in, int out) {
    const int64_t row = s.width * s.channels;
    group_norm(s, f32_rows(in, row), rows_of(out, row, s.out), w.gamma.f32(), w.beta.f32());
  }
  // The resnet over x in buffer `x` (live in `plan`); its result's buffer is live afterwards.
  ResnetOps resnet_ops(const ResnetW& r, int64_t rows, int64_t width, int64_t image_rows, BufferPlan& plan, int x) {
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

  // y (+)= c(SiLU(GN(x))) for x in buffer `in`, reading the normalised rows piece by piece.
  void norm_conv_rows(const GroupNormSpec& n, const NormW& nw, GroupNormAffine& f, const Conv2d& c, int in, int y) {
    group_norm_stats(n, f32_rows(in, n.width * n.channels), nw.gamma.f32(), nw.beta.f32(), f);
    const GroupNormRows src(n, f, buf[in].f32(), top_edge(), bottom_edge());
    run_rows(c, src, in, n.height, n.width, n.channels, y);
  }

  // x -> resnet(x) (in o.out: x's buffer, or another with a shortcut).
  void run_resnet(ResnetOps& o) {
    const ResnetW& r = *o.w;
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
  void shortcut_over_x(const ResnetOps& o) {
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
  void run_attention() {
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

  // The first decode's buffers made resident by all of its threads at once (runtime/
  // prefault.h): left to the first writes, the growing activations' new pages fall to the
  // last thread of each loop, which zeroes them while the others wait.
  void fault_in() {
    for (Tensor* t : {&buf[0], &buf[1], &buf[2], &z, &out_rows, &qkv_band, &qkv_all, &attn_buf, &sc_piece})
      if (t->defined()) prefault(t->data(), t->nbytes());
    conv_ws->prefault();
    resident = true;
  }

  void decode_image(const VaeConfig& cfg, const float* latents, float* image);
};

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
    UpBlockW ub;
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

bool VaeDecoder::winograd_for(DType compute, bool weight_cache) {
  if (!weight_cache || !winograd_wanted()) return false;
  // bf16: F(2x2, 3x3) with bf16 products (runtime/conv2d_winograd_bf16.h), where oneDNN has no
  // AMX (with AMX its direct bf16 kernel is kept: the two are not measured against each other).
  if (compute == DType::BF16) return !amx_available() && compute_supported(DType::BF16);
  return winograd_available();
}

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
  if (m.has_attn) {
    Impl::AttnOps& a = m.attn_ops;
    a.c = top;
    a.tokens = rows * w;
    a.gn = m.gn(top, rows, w, h, false, f32);
    a.x = cur;
    a.a = plan.take(Impl::act_bytes(top, rows, w, f32));
    plan.release(a.a);
    LinearSpec ls;
    ls.batch = 1;
    ls.rows = rows * w;
    ls.in = top;
    ls.out = 3 * top;
    a.qkv = Linear(ls, m.mid_attn.qkv);
    ls.out = top;
    a.out = Linear(ls, m.mid_attn.out);
    AttentionSpec as;
    as.batch = 1;
    as.heads = 1;
    as.q_len = rows * w;
    as.kv_len = h * w;
    as.head_dim = top;
    as.q = AttnLayout::bthd(rows * w, top, 1, 3 * top);
    as.k = as.v = AttnLayout::bthd(h * w, top, 1, 3 * top);
    as.out = AttnLayout::bthd(rows * w, top, 1, top);
    as.compute = m.compute;
    a.attn = Attention(as);
    a.counts.clear();
    for (const TokenRange& r : split_all(h, split->parts())) a.counts.push_back(size_t(r.size() * w * 3 * top));
    a.q_offset = m.band.begin * w * 3 * top;
    m.qkv_all = Tensor::empty({h * w, 3 * top});
    // One part: the band is the image, and its Q, K, V are the gathered ones (no copy; at
    // 1024 x 1024 100 MB less).
    m.qkv_band = split->parts() == 1 ? m.qkv_all : Tensor::empty({rows * w, 3 * top});
    m.attn_buf = Tensor::empty({rows * w, top});
  }
  m.resnets.push_back(m.resnet_ops(m.mid1, rows, w, h, plan, cur));
  cur = m.resnets.back().out;
  int64_t rr = rows, ww = w, hh = h;
  for (const UpBlockW& ub : m.ups) {
    for (const ResnetW& r : ub.resnets) {
      m.resnets.push_back(m.resnet_ops(r, rr, ww, hh, plan, cur));
      cur = m.resnets.back().out;
    }
    if (ub.has_upsampler) {
      Impl::UpsampleOps u;
      u.c = ub.upsampler.in;
      u.rows = rr;
      u.width = ww;
      // bf16 by Winograd: the upsampled input's convolution as four phases of a 2x2 one over x
      // (2.25 products per output instead of 4, runtime/conv2d_winograd_bf16.h).
      u.of_x = m.compute == DType::BF16 && m.by_winograd(ub.upsampler);
      if (u.of_x) u.conv = m.conv(ub.upsampler, ub.upsampler.in, rr, ww, false, f32, true);
      rr *= 2;
      ww *= 2;
      hh *= 2;
      if (!u.of_x) u.conv = m.conv(ub.upsampler, ub.upsampler.in, rr, ww, false, m.compute);
      u.x = cur;
      u.u = u.conv.uses_winograd() ? -1 : plan.take(Impl::act_bytes(u.c, rr, ww, m.compute));
      if (u.u >= 0) plan.release(u.x);
      u.y = plan.take(Impl::act_bytes(ub.upsampler.out, rr, ww, f32));
      plan.release(u.u >= 0 ? u.u : u.x);
      cur = u.y;
      m.upsamplers.push_back(std::move(u));
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
  for (int i = 0; i < Impl::kBuffers; ++i)
    m.buf[i] = plan.bytes[i] > 0 ? Tensor::empty({int64_t(plan.bytes[i] + 3) / 4}) : Tensor();
  int64_t sc_floats = 0;  // the largest piece of a shortcut written over x
  for (const Impl::ResnetOps& o : m.resnets)
    if (o.sc_rows > 0) sc_floats = std::max(sc_floats, o.sc.spec().height * o.sc.spec().width * o.sc.spec().out_channels);
  m.sc_piece = sc_floats > 0 ? Tensor::empty({sc_floats}) : Tensor();
  m.z = Tensor::empty({rows + 2, w, lat});
  m.out_rows = Tensor::empty({hh, ww, int64_t(cfg_.out_channels)});
  m.resident = false;
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

// latents [C, h, w] -> image [3, H, W] (every part gets the whole image).
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
  for (const UpBlockW& ub : ups) {
    for (size_t r = 0; r < ub.resnets.size(); ++r) run_resnet(resnets[ri++]);
    if (ub.has_upsampler) {
      const UpsampleOps& u = upsamplers[ui++];
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

}  // namespace dit
