// The AutoencoderKL decoder's state behind models/vae/vae_decoder.h: its weights, the plan
// prepare() makes for one latent shape (models/vae/vae_decoder_plan.cpp) and the buffers and
// primitives decode() runs it with (models/vae/vae_decoder.cpp). Internal to models/vae/.
//
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
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "models/vae/vae_decoder.h"
#include "models/vae/vae_weights.h"
#include "runtime/error.h"
#include "runtime/group_norm.h"
#include "runtime/row_sources.h"
#include "runtime/row_split.h"

namespace dit {

struct VaeDecoder::Impl {
  // Weights.
  bool has_post_quant = false;
  vae::ConvW post_quant, conv_in, conv_out;
  vae::ResnetW mid0, mid1;
  bool has_attn = false;
  vae::AttnW mid_attn;
  std::vector<vae::UpBlockW> ups;
  vae::NormW norm_out;
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
    const vae::ResnetW* w = nullptr;
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
  void* rows_of(int i, int64_t row, DType t) {
    return static_cast<char*>(buf[i].data()) + row * int64_t(dtype_size(t));
  }
  float* f32_rows(int i, int64_t row) { return static_cast<float*>(rows_of(i, row, DType::F32)); }
  bool top_edge() const { return band.begin == 0; }
  bool bottom_edge() const { return band.end == h0; }

  // Planning (vae_decoder_plan.cpp), for the band of `rows` rows of `width` pixels of an
  // image of `image_rows` rows at a block's resolution.
  //
  // Whether the 3x3 convolution `cw` runs by Winograd (at least 16 channels in and out).
  bool by_winograd(const vae::ConvW& cw) const;
  // A convolution over the band: a 3×3 one reads it with its halo rows (height rows + 2, no
  // zero rows added), a 1×1 one the rows alone. input: the type run() gets (F32 for the latents
  // and the shortcut's x, compute after GroupNorm or the upsampler; an f32 x with bf16 compute
  // is converted inside the convolution). nearest2x: the convolution of the band's nearest-2x
  // upsampling, reading the band itself (rows, width and the input type x's; the bf16
  // Winograd form only).
  Conv2d conv(const vae::ConvW& cw, int64_t c_in, int64_t rows, int64_t width, bool accumulate, DType input,
              bool nearest2x = false);
  GroupNormSpec gn(int64_t c, int64_t rows, int64_t width, int64_t image_rows, bool silu_after, DType out);
  // The resnet over x in buffer `x` (live in `plan`); its result's buffer is live afterwards.
  ResnetOps resnet_ops(const vae::ResnetW& r, int64_t rows, int64_t width, int64_t image_rows, BufferPlan& plan, int x);
  // The mid block's attention (c channels) over x in buffer `x`, which it adds to in place,
  // and its scratch.
  void plan_attention(int64_t c, int64_t rows, int64_t width, int64_t image_rows, BufferPlan& plan, int x);
  // The upsampler over x in buffer `x` (the band before upsampling); its output's buffer is
  // live afterwards.
  UpsampleOps upsample_ops(const vae::ConvW& cw, int64_t rows, int64_t width, BufferPlan& plan, int x);
  // The buffers `plan` sized, and the others every shape needs (lat: the latents' channels).
  void allocate(const BufferPlan& plan, int64_t lat, int64_t image_rows, int64_t image_width, int out_channels);

  // Running (vae_decoder.cpp).
  //
  // Runs c on the band at `band` (halo row first, in c's input type) into buffer `out`'s rows
  // (f32); a 3×3 convolution fetches the halo rows first.
  void run_on(const Conv2d& c, void* band, int out);
  void run(const Conv2d& c, int in, int out) { run_on(c, buf[in].data(), out); }
  // c over the rows `src` makes from buffer `in` (f32, `in_c` channels, its halo rows fetched
  // first) into buffer `out`'s rows.
  void run_rows(const Conv2d& c, const RowSource& src, int in, int64_t rows, int64_t width, int64_t in_c, int out);
  void norm(const GroupNormSpec& s, const vae::NormW& w, int in, int out);
  // y (+)= c(SiLU(GN(x))) for x in buffer `in`, reading the normalised rows piece by piece.
  void norm_conv_rows(const GroupNormSpec& n, const vae::NormW& nw, GroupNormAffine& f, const Conv2d& c, int in, int y);
  // x -> resnet(x) (in o.out: x's buffer, or another with a shortcut).
  void run_resnet(ResnetOps& o);
  void shortcut_over_x(const ResnetOps& o);
  void run_attention();
  void run_upsampler(const UpsampleOps& u);
  void fault_in();
  // latents [C, h, w] -> image [3, H, W] (every part gets the whole image).
  void decode_image(const VaeConfig& cfg, const float* latents, float* image);
};

}  // namespace dit
