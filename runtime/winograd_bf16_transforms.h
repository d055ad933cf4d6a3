// The transforms of the bf16 Winograd convolutions (runtime/conv2d_winograd_bf16.h), one tile's
// channels vectorised: F(2×2, 3×3) for a 3×3 convolution, and for a 3×3 convolution of a nearest-2×
// upsampled input its four phases, each a 2×2 convolution of the input before upsampling by
// F(2×2, 2×2) (docs/vae.md, "bf16 by Winograd"). Matrices (Lavin and Gray 2016):
//
//   F(2×2, 3×3): Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]  G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1]  Aᵀ = [1 1 1 0; 0 1 -1 -1]
//   F(2×2, 2×2): Bᵀ = [1 -1 0; 0 1 0; 0 -1 1]                   G = [1 0; 1 1; 0 1]                 Aᵀ = [1 1 0; 0 1 1]
//
// A tile's input is a 4×4 window of pixels, p[4i + j] (rows i, columns j; C values each): for
// F(2×2, 3×3) the window itself; for the upsampled form the window of the input before
// upsampling whose 3×3 sub-windows at (py, px) ∈ {0, 1}² feed phase (py, px), the outputs at
// rows 2a + py, columns 2b + px of the tile's 4×4 upsampled outputs. Transformed values are laid
// out as planes, point k of tile t at v[k·ks + t·C + c]; M likewise at m[k·ks + o].
#pragma once

#include <cstdint>

namespace dit::winograd {

constexpr int kPoints3x3 = 16;  // F(2×2, 3×3): 4×4 points
constexpr int kPointsUp2 = 36;  // four phases of F(2×2, 2×2): 4 × 3×3 points

// V for tiles [t0, t1) of a piece, tile t's 16 window pointers at p[16·(t - t0)], into bf16.
void input_3x3(const float* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v);
void input_3x3(const uint16_t* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v);
void input_up2(const float* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v);
void input_up2(const uint16_t* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v);

// y = Aᵀ M A + b (+ y when accumulating) for one tile's 2×2 outputs y[a][b] of F(2×2, 3×3), or one
// phase's of F(2×2, 2×2) (m: that phase's first plane); null: outside the image, not written.
void output_3x3(const float* m, int64_t ks, int64_t O, const float* bias, float* const y[2][2], bool accumulate);
void output_2x2(const float* m, int64_t ks, int64_t O, const float* bias, float* const y[2][2], bool accumulate);

// U = G g Gᵀ of the weight [O, C, 3, 3] as [16, C, O]; or of each phase's 2×2 kernel of a 3×3
// convolution after a nearest-2× upsampling (its rows and columns summed: phase 0 takes
// w0 and w1 + w2, phase 1 w0 + w1 and w2) as [36, C, O], phase 2py + px at planes 9(2py + px)...
// Computed in double, stored in f32.
void weights_3x3(const float* w, int64_t C, int64_t O, float* u);
void weights_up2(const float* w, int64_t C, int64_t O, float* u);

}  // namespace dit::winograd
