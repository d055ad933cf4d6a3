// The Winograd form of a channels-last 3×3 convolution (Conv2dSpec::winograd), for
// runtime/conv2d.cpp: oneDNN's F(4×4, 3×3) kernel (`jit_wino_4x3`, f32 on AVX-512) computes
// each 4×4 tile of outputs from a 6×6 tile of inputs with 36 multiplications per channel pair
// instead of 144 — 2–3× faster than the direct kernel on the VAE decoder's convolutions, its
// error against exact arithmetic the direct kernel's (docs/vae.md, "Winograd convolutions").
//
// The kernel reads and writes only oneDNN's blocked layout (nChw16c), and its scratch grows
// with the tiles it is given (303 MB for 256 → 256 channels at 256 × 256 in one call). So the
// convolution runs over pieces of output rows: each piece's input rows are reordered from
// channels last into a blocked copy, convolved into a blocked output, and reordered back (adding
// to y when the convolution accumulates). A piece covers about 16384 pixels, in whole rows of
// 4 (one tile), fewer while the scratch would pass 64 MB: 44–60 MB at the decoder's sizes, and within
// 0.9–1.1x the speed of one call over the whole image.
//
//   auto plan = WinogradPlan::make(spec, has_bias, *workspace);   // null: no Winograd kernel here
//   Tensor w = weight in plan->weights_desc();                     // oneDNN's Winograd weight layout
//   plan->bind(w.data(), bias);
//   plan->run(x, y, *workspace);                                   // x [N, H, W, C], y [N, OH, OW, O]
//
// Both Winograd forms implement WinogradConv below; make_winograd picks one by the compute type.
//
// Pieces: with the halo form (Conv2dSpec::pad_rows 0: x carries the rows above and below) the
// output rows are cut into pieces of R rows; where R does not divide them, the last piece is
// the last R rows, of which only those not yet written are copied out. Every piece has the same
// shape, so one primitive, one weight layout and one pair of reorders serve them all. With
// padding above and below, the whole image is one piece. The pieces depend on the shape only,
// never on the thread count: results are the same bits with any number of threads.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/conv2d.h"
#include "runtime/engine.h"

namespace dit {

// A Winograd form of a convolution, as Conv2d runs it: the weight in the form's own layout
// (made once by pack, kept by Conv2d: mapped from the weight cache or private), then runs.
class WinogradConv {
 public:
  virtual ~WinogradConv() = default;
  virtual const dnnl::memory::desc& weights_desc() const = 0;
  // Writes the weight [O, C, 3, 3] (f32) into `dst` in weights_desc().
  virtual void pack(const float* weight, void* dst) const = 0;
  // Whether pack is quick enough to run in every process (else only into the weight cache).
  virtual bool fast_pack() const = 0;
  // Names the packed form's content in the weight cache's key (beside its layout).
  virtual std::string layout_key() const = 0;
  virtual const std::string& impl_name() const = 0;
  // The weight in weights_desc() and the f32 bias (null: none), kept by the caller.
  virtual void bind(const void* weight, const float* bias) = 0;
  // x: [batch, H, W, C] in the spec's input type; y: [batch, OH, OW, O] f32 (added to when accumulating).
  virtual void run(const void* x, float* y, Conv2dWorkspace& ws) const = 0;
  // The same with the input rows from `x` (batch 1, halo rows, Conv2dSpec::winograd_row_source).
  virtual void run_rows(const RowSource& x, float* y, Conv2dWorkspace& ws) const = 0;
};

// The Winograd form for `s`: oneDNN's f32 F(4×4, 3×3) (WinogradPlan) for f32 compute, F(2×2,
// 3×3) in bf16 (runtime/conv2d_winograd_bf16.h) for bf16; null where there is none.
std::unique_ptr<WinogradConv> make_winograd(const Conv2dSpec& s, bool has_bias, Conv2dWorkspace& ws);

class WinogradPlan final : public WinogradConv {
 public:
  // The plan for `s` (f32 compute and input, channels last, 3×3, stride 1), its buffers reserved
  // in `ws`; null where oneDNN has no Winograd kernel for it (a CPU without AVX-512, a shape the
  // kernel does not take). Throws dit::Error for other oneDNN failures.
  static std::unique_ptr<WinogradPlan> make(const Conv2dSpec& s, bool has_bias, Conv2dWorkspace& ws);
  ~WinogradPlan();

  const dnnl::memory::desc& weights_desc() const override { return weights_md_; }
  // oneDNN's reorder into its layout: slow (5.9 s for the SD VAE's weights on the 2-core VM).
  void pack(const float* weight, void* dst) const override;
  bool fast_pack() const override { return false; }
  std::string layout_key() const override { return ""; }  // oneDNN's layout names it
  const std::string& impl_name() const override { return impl_name_; }
  void bind(const void* weight, const float* bias) override;
  // x: [batch, H, W, C] f32; y: [batch, OH, OW, O] f32 (added to when accumulating).
  void run(const void* x, float* y, Conv2dWorkspace& ws) const override;
  // The same with the input rows from `x` (batch 1, halo rows, Conv2dSpec::winograd_row_source),
  // each piece's rows written into the workspace's buffer of the blocked output (free until the
  // convolution writes it) and reordered from there into the blocked input.
  void run_rows(const RowSource& x, float* y, Conv2dWorkspace& ws) const override;

 private:
  WinogradPlan() = default;
  struct Step {
    int64_t out_row = 0;   // the piece's first output row (its input rows start here in the halo form)
    bool tail = false;     // copy out only its last `tail_rows` rows
  };
  Conv2dShape shape_;  // x [batch, in_h, in_w, in_c] -> y [batch, out_h, out_w, out_c]
  int64_t rows_ = 0, tail_rows_ = 0;
  bool halo_ = true;
  bool row_source_ = false;
  void bind_buffers(Conv2dWorkspace& ws) const;
  void run_piece(const Step& step, float* yn) const;
  std::vector<Step> steps_;
  std::string impl_name_;
  dnnl::memory::desc weights_md_;
  dnnl::convolution_forward conv_;
  dnnl::reorder src_in_, dst_out_, tail_out_;
  // Memories whose handles run() sets: x's rows, the blocked copies, the scratch, y's rows.
  dnnl::memory user_src_, src_, dst_, dst_tail_view_, user_dst_, user_tail_, scratch_;
  std::unordered_map<int, dnnl::memory> conv_args_, src_in_args_, dst_out_args_, tail_out_args_;
};

}  // namespace dit
