// 2-D convolution (NCHW, PyTorch [out, in, kh, kw] weights, bias, stride, zero padding)
// on oneDNN, created once and reused; optional fused residual y = conv(x) + y; f32 or bf16
// compute (x and y stay f32 in memory either way); direct, or for channels-last 3×3 f32
// convolutions Winograd's F(4×4, 3×3) where oneDNN has it (runtime/conv2d_winograd.h).
#pragma once

#include <memory>
#include <string>

#include "runtime/dtype.h"
#include "runtime/packed_source.h"
#include "runtime/tensor.h"

namespace dit {

struct Conv2dSpec {
  int64_t batch = 1, in_channels = 0, out_channels = 0, height = 0, width = 0;
  int64_t kernel = 3, stride = 1, padding = 1;
  // Zero rows above and below x (-1: `padding`); 0 when x carries its neighbours' rows (a band
  // of a larger image with halo rows, runtime/row_split.h).
  int64_t pad_rows = -1;
  bool accumulate = false;  // y = conv(x) + b + y (residual add fused as a sum post-op)
  // true: let oneDNN choose the activation layout (x and y are reordered through buffers
  // allocated in the constructor when it picks a blocked one); false: plain NCHW in place.
  bool blocked = true;
  // true: x and y are channels last, [batch, H, W, channels], used in place by the primitive
  // (no layout reorders; `blocked` does not apply).
  bool nhwc = false;
  // F32, or BF16: weights and x multiplied in bf16 (an f32 x is converted by a reorder: NCHW
  // needs blocked), accumulation, bias and y in f32.
  DType compute = DType::F32;
  // The type of x given to run(): F32, or BF16 (bf16 compute with nhwc: x is used as it is).
  DType input = DType::F32;
  // true: Winograd's F(4×4, 3×3) algorithm where oneDNN has a kernel for it (f32 compute and x,
  // nhwc, 3×3, stride 1, padding 1 in W; AVX-512), else the direct one: 2-3x faster on the VAE
  // decoder's convolutions, as exact (runtime/conv2d_winograd.h). impl_info() says which runs.
  // oneDNN's transform of the weight into the kernel's layout is slow (5.9 s for the SD VAE's
  // weights on the 2-core VM): give a packed source, so that it is made once per machine; one
  // whose directory fails runs the direct form (without a source the transform is private).
  bool winograd = false;
  // Winograd with halo rows (pad_rows 0): output rows a piece (0: about 16384 pixels; runtime/conv2d_winograd.h).
  int64_t winograd_rows = 0;
  // Winograd with halo rows: the input may also be given row by row (Conv2d::run_rows), each
  // piece's input rows made in the workspace (in the blocked output's buffer, free until then).
  bool winograd_row_source = false;
  // The first output row's row in the whole image when x is a band of it (its halo form): the
  // bf16 Winograd form starts its 2-row tiles at even image rows, so a band gets the bits of the
  // whole image's convolution (runtime/conv2d_winograd_bf16.h).
  int64_t image_row = 0;
  // true: x is the input of a nearest-2× upsampling, [batch, height, width, C] (its halo rows
  // included), and y = conv(nearest2x(x)) [batch, OH, OW, O] with OH, OW of the upsampled x: the
  // VAE decoder's upsamplers, without the upsampled x in memory. Only the bf16 Winograd form
  // computes it (winograd, bf16 compute; its four phases, runtime/conv2d_winograd_bf16.h).
  bool nearest2x_input = false;
  int64_t row_padding() const { return pad_rows < 0 ? padding : pad_rows; }
  // The input's rows and columns as convolved: x's, or the upsampled x's (its halo rows 1 each).
  int64_t conv_height() const { return !nearest2x_input ? height : row_padding() == 0 ? 2 * height - 2 : 2 * height; }
  int64_t conv_width() const { return nearest2x_input ? 2 * width : width; }
  int64_t out_height() const { return (conv_height() + 2 * row_padding() - kernel) / stride + 1; }
  int64_t out_width() const { return (conv_width() + 2 * padding - kernel) / stride + 1; }
};

// The sizes a convolution's kernels loop over: x [batch, in_h, in_w, in_c] (as given, halo rows
// included) -> y [batch, out_h, out_w, out_c].
struct Conv2dShape {
  int64_t batch = 1, in_h = 0, in_w = 0, in_c = 0, out_h = 0, out_w = 0, out_c = 0;
  static Conv2dShape of(const Conv2dSpec& s) {
    return {s.batch, s.height, s.width, s.in_channels, s.out_height(), s.out_width(), s.out_channels};
  }
};

// Buffers for the blocked-layout copies of x and y and oneDNN's scratchpad, shared by
// convolutions that run one after another (a decoder's thirty convolutions need one set,
// sized for the largest, instead of one each). Sized while the convolutions are built;
// nothing is allocated when they run.
class Conv2dWorkspace {
 public:
  void reserve(size_t src_bytes, size_t dst_bytes, size_t scratch_bytes);
  void* src() { return src_.data(); }
  void* dst() { return dst_.data(); }
  void* scratch() { return scratch_.data(); }
  size_t bytes() const;
  // Every buffer's pages made resident by the OpenMP threads together (runtime/prefault.h).
  void prefault();

 private:
  Tensor src_, dst_, scratch_;
};

// The input of Conv2d::run_rows: rows(first, count, out) writes the convolution's input rows
// first .. first + count - 1 into out ([count, W, C] f32, channels last; row 0 is the top halo
// row) — a transform of some other tensor (a GroupNorm, an upsampling) made piece by piece as the
// convolution reads it, instead of into a buffer of the whole input.
class RowSource {
 public:
  virtual void rows(int64_t first, int64_t count, float* out) const = 0;

 protected:
  ~RowSource() = default;
};

// Whether oneDNN has its Winograd kernel on this CPU (f32 on AVX-512); probed once.
bool winograd_available();

class Conv2d {
 public:
  Conv2d();
  // weight [out, in, k, k] f32 (or bf16, converted), bias [out] or undefined. With a
  // workspace the convolution borrows its buffers (it must outlive the convolution and
  // not be used by two convolutions at once); without one it owns its buffers.
  // packed (optional): where the weight in the primitive's layout is kept (runtime/packed_weights.h,
  // WeightStore::packed_source): made there once per machine and layout, then mapped by every
  // convolution of every process that reads it (no reorder, no private copy). Without one, or
  // where an optional directory failed, the weight is reordered into a private copy.
  Conv2d(const Conv2dSpec& spec, const Tensor& weight, const Tensor& bias,
         std::shared_ptr<Conv2dWorkspace> workspace = nullptr, const PackedSource& packed = {});
  Conv2d(Conv2d&&) noexcept;
  Conv2d& operator=(Conv2d&&) noexcept;
  ~Conv2d();
  // x: [batch, in, H, W]; y: [batch, out, H', W'] (NCHW f32; NHWC when spec.nhwc).
  void run(const float* x, float* y) const;     // spec.input F32
  void run(const uint16_t* x, float* y) const;  // spec.input BF16
  // The same with the input's rows made by `x` as each piece needs them (uses_winograd(), built
  // with spec.winograd_row_source, batch 1, halo rows): y = conv(rows) (+ y).
  void run_rows(const RowSource& x, float* y) const;
  const Conv2dSpec& spec() const;
  const std::string& impl_info() const;  // oneDNN implementation name, for diagnostics
  bool uses_winograd() const;             // whether spec().winograd found a Winograd kernel
  bool weight_shared() const;             // whether the weight is read from its packed entry

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void run_any(const void* x, float* y) const;
};

}  // namespace dit
