// The bf16 Winograd form of a channels-last 3×3 convolution (Conv2dSpec::winograd with bf16
// compute), for runtime/conv2d.cpp: F(2×2, 3×3) written here, its sixteen products per channel
// pair a batched bf16 matmul through oneDNN (f32 sums), where the direct kernel needs 36 for the
// same 2×2 outputs. oneDNN has no bf16 Winograd kernel; its direct bf16 kernel ran at 423
// against the f32 Winograd's 569 effective GFLOP/s on the 2-core AVX512_BF16 VM (no AMX), so a
// bf16 decoder there was slower than the f32 one (docs/vae.md, "bf16 by Winograd").
//
// Per 4×4 input tile d (tiles 2 apart) and output channel o (Lavin & Gray 2016, docs/vae.md):
//   V = Bᵀ d B              (input transform, f32, then rounded to bf16)   [16, tiles, C]
//   U = G g Gᵀ              (the weight's, once, rounded to bf16)          [16, C, O]
//   M[k] = V[k] · U[k]      (16 matmuls, bf16 products, f32 sums)          [16, tiles, O]
//   y = Aᵀ M A + b (+ y)    (output transform, f32)                        2×2 outputs a tile
// With a nearest-2× upsampled input (Conv2dSpec::nearest2x_input, the VAE's upsamplers) the plan
// reads x before the upsampling: the output at rows 2r + py, columns 2c + px (phase (py, px)) is a
// 2×2 convolution of x (the 3×3 kernel's rows and columns summed: w0 and w1 + w2 for phase 0,
// w0 + w1 and w2 for phase 1), each phase by F(2×2, 2×2) on one 4×4 window of x per 2×2 of x's
// positions: 36 products for 16 outputs (2.25 an output against F(2×2, 3×3)'s 4 and the direct
// kernel's 9), and no upsampled x in memory. Transforms: runtime/winograd_bf16_transforms.h.
//
// F(2×2, 3×3) rather than oneDNN's f32 F(4×4, 3×3): in bf16 the larger tiles' transforms
// (entries up to 8 and 5) multiply the rounding error: F(3×3, 3×3) 5.9× and F(4×4, 3×3) 10.6×
// the direct bf16 kernel's, this one 1.7× (tools/winograd_bf16_error.py;
// tests/runtime/test_conv2d_winograd_bf16.cpp checks this one against 2.5×).
//
// The output is computed over pieces of tile rows (each piece's tiles, V and M of a few MB, stay
// in cache between the three passes); where the pieces do not divide the tile rows, the last is
// the last full piece, of which only the rows not yet written are written. x's rows come from
// memory (run) or from a RowSource (run_rows) into a buffer of one piece's input rows. Rows
// outside x (the padding above and below, the row past an odd height) and columns outside it
// read a row of zeros. One matmul primitive serves every piece; the results do not depend on
// the thread count. Tiles start at even rows of the whole image (Conv2dSpec::image_row), so that
// a band of its rows (--vae-parallel) gets the bits of the whole image's convolution: with an odd
// first row the first tile starts one row above the band, its row there not written (that output
// row reads the tile's top input row, zeros here; the row below does not read it: Aᵀ's second row
// takes M's rows 1-3, which Bᵀ makes from input rows 1-3).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/conv2d_winograd.h"

namespace dit {

class WinogradBf16Plan final : public WinogradConv {
 public:
  // The plan for `s` (bf16 compute, x f32 or bf16, channels last, 3×3, stride 1, padding 1,
  // 0 or 1 rows of padding above and below; x itself or its nearest-2× upsampling), its buffers
  // reserved in `ws`; null for other shapes. Throws dit::Error for oneDNN failures.
  static std::unique_ptr<WinogradBf16Plan> make(const Conv2dSpec& s, bool has_bias, Conv2dWorkspace& ws);

  const dnnl::memory::desc& weights_desc() const override { return weights_md_; }
  void pack(const float* weight, void* dst) const override;
  bool fast_pack() const override { return true; }
  std::string layout_key() const override { return up_ ? "winograd-up2-f2x2-2x2-bf16-v1" : "winograd-f2x2-bf16-v1"; }
  const std::string& impl_name() const override { return impl_name_; }
  void bind(const void* weight, const float* bias) override;
  void run(const void* x, float* y, Conv2dWorkspace& ws) const override;
  void run_rows(const RowSource& x, float* y, Conv2dWorkspace& ws) const override;

  int64_t piece_tile_rows() const { return rows_t_; }  // for the tests
  // The batched matmul of each piece, [points, tiles, C] x [points, C, O], and the pieces a run
  // makes of one image (for dit-kernel-bench).
  int64_t points() const { return points_; }
  int64_t piece_tiles() const { return tiles_; }
  int64_t pieces() const { return int64_t(steps_.size()); }

 private:
  WinogradBf16Plan() = default;
  struct Step {
    int64_t tile_row = 0;   // the piece's first tile row
    int64_t write_from = 0; // the first of its tile rows to write (a tail piece's are partly written)
  };
  // One piece whose input rows are rowp_ (2·rows_t_ + 2 of them, null: zeros; bf16 or f32) into yn.
  void run_piece(const Step& step, float* yn, Conv2dWorkspace& ws, bool bf16_rows) const;
  void bind_buffers(Conv2dWorkspace& ws) const;

  Conv2dShape shape_;  // x [batch, in_h, in_w, in_c] -> y [batch, out_h, out_w, out_c]
  int64_t pad_rows_ = 0;               // rows of zeros above x (0: the halo form)
  int64_t phase_ = 0;                  // Conv2dSpec::image_row's parity: the first tile starts at output row -phase_
  bool up_ = false;                    // Conv2dSpec::nearest2x_input: four phases of F(2×2, 2×2)
  int64_t points_ = 16;                // products per channel pair a tile: 16, or 36 with up_
  int64_t grid_h_ = 0, grid_w_ = 0;    // the positions tiled: y's, or with up_ x's (y's halved)
  int64_t tiles_w_ = 0, tiles_h_ = 0;  // tiles across and down the grid
  int64_t rows_t_ = 0, tiles_ = 0;     // tile rows a piece and its tiles
  int64_t v_plane_ = 0, m_plane_ = 0;  // elements from one of V's (M's) 16 planes to the next
  bool bf16_input_ = false, accumulate_ = false, row_source_ = false;
  size_t v_bytes_ = 0;                 // the piece's V at the start of the scratch, then the matmul's
  std::vector<Step> steps_;
  mutable std::vector<const void*> rowp_;  // the piece's input rows (null: zeros)
  std::vector<float> zeros_;               // a row of zeros (max(C, O) floats) for missing pixels and no bias
  const float* bias_ = nullptr;
  std::string impl_name_;
  dnnl::memory::desc weights_md_;
  dnnl::matmul matmul_;
  mutable dnnl::memory v_, m_, scratch_;
  dnnl::memory w_;
  std::unordered_map<int, dnnl::memory> args_;
};

}  // namespace dit
