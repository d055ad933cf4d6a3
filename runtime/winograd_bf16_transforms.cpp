#include "runtime/winograd_bf16_transforms.h"

#include "runtime/dtype.h"
#include "runtime/parallel_for.h"
#include "runtime/simd_math.h"

namespace dit::winograd {

namespace {

inline float load(const float* p, int64_t c) { return p[c]; }
inline float load(const uint16_t* p, int64_t c) { return bf16_to_f32(p[c]); }

template <class T>
DIT_MULTIVERSION void input_3x3_t(const T* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v) {
  for (int64_t t = t0; t < t1; ++t) {
    const T* const* q = p + kPoints3x3 * (t - t0);
    uint16_t* o = v + t * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      float d[4][4];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) d[i][j] = load(q[4 * i + j], c);
      float b[4][4];  // Bᵀ d
      for (int j = 0; j < 4; ++j) {
        b[0][j] = d[0][j] - d[2][j];
        b[1][j] = d[1][j] + d[2][j];
        b[2][j] = d[2][j] - d[1][j];
        b[3][j] = d[1][j] - d[3][j];
      }
      for (int i = 0; i < 4; ++i) {  // (Bᵀ d) B
        o[(4 * i + 0) * ks + c] = f32_to_bf16_rne(b[i][0] - b[i][2]);
        o[(4 * i + 1) * ks + c] = f32_to_bf16_rne(b[i][1] + b[i][2]);
        o[(4 * i + 2) * ks + c] = f32_to_bf16_rne(b[i][2] - b[i][1]);
        o[(4 * i + 3) * ks + c] = f32_to_bf16_rne(b[i][1] - b[i][3]);
      }
    }
  }
}

// V = Bᵀ s B of one phase's 3×3 sub-window s (rows a, b, e) into its nine planes at op.
inline __attribute__((always_inline)) void phase_in(float a0, float a1, float a2, float b0, float b1, float b2,
                                                    float e0, float e1, float e2, uint16_t* op, int64_t ks, int64_t c) {
  const float u0 = a0 - b0, u1 = a1 - b1, u2 = a2 - b2;  // Bᵀ s: rows a - b, b, e - b
  const float w0 = e0 - b0, w1 = e1 - b1, w2 = e2 - b2;
  op[0 * ks + c] = f32_to_bf16_rne(u0 - u1);  // (Bᵀ s) B: columns 0 - 1, 1, 2 - 1
  op[1 * ks + c] = f32_to_bf16_rne(u1);
  op[2 * ks + c] = f32_to_bf16_rne(u2 - u1);
  op[3 * ks + c] = f32_to_bf16_rne(b0 - b1);
  op[4 * ks + c] = f32_to_bf16_rne(b1);
  op[5 * ks + c] = f32_to_bf16_rne(b2 - b1);
  op[6 * ks + c] = f32_to_bf16_rne(w0 - w1);
  op[7 * ks + c] = f32_to_bf16_rne(w1);
  op[8 * ks + c] = f32_to_bf16_rne(w2 - w1);
}

template <class T>
DIT_MULTIVERSION void input_up2_t(const T* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v) {
  for (int64_t t = t0; t < t1; ++t) {
    const T* const* q = p + kPoints3x3 * (t - t0);
    uint16_t* o = v + t * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float d00 = load(q[0], c), d01 = load(q[1], c), d02 = load(q[2], c), d03 = load(q[3], c);
      const float d10 = load(q[4], c), d11 = load(q[5], c), d12 = load(q[6], c), d13 = load(q[7], c);
      const float d20 = load(q[8], c), d21 = load(q[9], c), d22 = load(q[10], c), d23 = load(q[11], c);
      const float d30 = load(q[12], c), d31 = load(q[13], c), d32 = load(q[14], c), d33 = load(q[15], c);
      // phase (py, px): the sub-window at rows py.., columns px.. (written out: GCC vectorises this)
      phase_in(d00, d01, d02, d10, d11, d12, d20, d21, d22, o, ks, c);
      phase_in(d01, d02, d03, d11, d12, d13, d21, d22, d23, o + 9 * ks, ks, c);
      phase_in(d10, d11, d12, d20, d21, d22, d30, d31, d32, o + 18 * ks, ks, c);
      phase_in(d11, d12, d13, d21, d22, d23, d31, d32, d33, o + 27 * ks, ks, c);
    }
  }
}

// Aᵀ M A + b for output channel o of one tile: kN = 4 (F(2×2, 3×3)) or 3 (F(2×2, 2×2)) points a side.
template <int kN>
inline __attribute__((always_inline)) void tile_out(const float* m, int64_t ks, int64_t o, float b, float& r00,
                                                    float& r01, float& r10, float& r11) {
  float a0[kN], a1[kN];  // Aᵀ M
  for (int j = 0; j < kN; ++j) {
    if constexpr (kN == 4) {
      const float m0 = m[j * ks + o], m1 = m[(4 + j) * ks + o], m2 = m[(8 + j) * ks + o], m3 = m[(12 + j) * ks + o];
      a0[j] = m0 + m1 + m2;
      a1[j] = m1 - m2 - m3;
    } else {
      const float m0 = m[j * ks + o], m1 = m[(3 + j) * ks + o], m2 = m[(6 + j) * ks + o];
      a0[j] = m0 + m1;
      a1[j] = m1 + m2;
    }
  }
  if constexpr (kN == 4) {  // (Aᵀ M) A
    r00 = a0[0] + a0[1] + a0[2] + b;
    r01 = a0[1] - a0[2] - a0[3] + b;
    r10 = a1[0] + a1[1] + a1[2] + b;
    r11 = a1[1] - a1[2] - a1[3] + b;
  } else {
    r00 = a0[0] + a0[1] + b;
    r01 = a0[1] + a0[2] + b;
    r10 = a1[0] + a1[1] + b;
    r11 = a1[1] + a1[2] + b;
  }
}

// A tile whose four outputs are all inside the image.
template <int kN, bool kAccumulate>
DIT_MULTIVERSION void output_whole(const float* m, int64_t ks, int64_t O, const float* bias, float* y00, float* y01,
                                   float* y10, float* y11) {
#pragma omp simd
  for (int64_t o = 0; o < O; ++o) {
    float r00, r01, r10, r11;
    tile_out<kN>(m, ks, o, bias[o], r00, r01, r10, r11);
    y00[o] = kAccumulate ? y00[o] + r00 : r00;
    y01[o] = kAccumulate ? y01[o] + r01 : r01;
    y10[o] = kAccumulate ? y10[o] + r10 : r10;
    y11[o] = kAccumulate ? y11[o] + r11 : r11;
  }
}

template <int kN>
void output_t(const float* m, int64_t ks, int64_t O, const float* bias, float* const y[2][2], bool accumulate) {
  if (y[0][0] && y[0][1] && y[1][0] && y[1][1]) {
    if (accumulate)
      output_whole<kN, true>(m, ks, O, bias, y[0][0], y[0][1], y[1][0], y[1][1]);
    else
      output_whole<kN, false>(m, ks, O, bias, y[0][0], y[0][1], y[1][0], y[1][1]);
    return;
  }
  for (int64_t o = 0; o < O; ++o) {  // a tile on an edge of the image
    float r[2][2];
    tile_out<kN>(m, ks, o, bias[o], r[0][0], r[0][1], r[1][0], r[1][1]);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        if (float* q = y[i][j]) q[o] = accumulate ? q[o] + r[i][j] : r[i][j];
  }
}

}  // namespace

void input_3x3(const float* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v) {
  input_3x3_t(p, t0, t1, ks, C, v);
}
void input_3x3(const uint16_t* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v) {
  input_3x3_t(p, t0, t1, ks, C, v);
}
void input_up2(const float* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v) {
  input_up2_t(p, t0, t1, ks, C, v);
}
void input_up2(const uint16_t* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v) {
  input_up2_t(p, t0, t1, ks, C, v);
}
void output_3x3(const float* m, int64_t ks, int64_t O, const float* bias, float* const y[2][2], bool accumulate) {
  output_t<4>(m, ks, O, bias, y, accumulate);
}
void output_2x2(const float* m, int64_t ks, int64_t O, const float* bias, float* const y[2][2], bool accumulate) {
  output_t<3>(m, ks, O, bias, y, accumulate);
}

void weights_3x3(const float* w, int64_t C, int64_t O, float* u) {
  parallel_for(O, true, [&](int64_t o) {
    for (int64_t c = 0; c < C; ++c) {
      const float* g = w + (o * C + c) * 9;
      double t[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        t[0][j] = g[j];
        t[1][j] = (double(g[j]) + g[3 + j] + g[6 + j]) / 2;
        t[2][j] = (double(g[j]) - g[3 + j] + g[6 + j]) / 2;
        t[3][j] = g[6 + j];
      }
      for (int i = 0; i < 4; ++i) {  // (G g) Gᵀ
        const double r[4] = {t[i][0], (t[i][0] + t[i][1] + t[i][2]) / 2, (t[i][0] - t[i][1] + t[i][2]) / 2, t[i][2]};
        for (int k = 0; k < 4; ++k) u[((4 * i + k) * C + c) * O + o] = float(r[k]);
      }
    }
  });
}

void weights_up2(const float* w, int64_t C, int64_t O, float* u) {
  // Phase 0 of a row (or column) reads the rows before upsampling {r - 1, r} with the taps
  // {w0, w1 + w2}; phase 1 reads {r, r + 1} with {w0 + w1, w2}.
  static constexpr int kSum[2][2][3] = {{{1, 0, 0}, {0, 1, 1}}, {{1, 1, 0}, {0, 0, 1}}};
  parallel_for(O, true, [&](int64_t o) {
    for (int64_t c = 0; c < C; ++c) {
      const float* g = w + (o * C + c) * 9;
      for (int py = 0; py < 2; ++py)
        for (int px = 0; px < 2; ++px) {
          double k2[2][2];  // the phase's 2×2 kernel
          for (int a = 0; a < 2; ++a)
            for (int b = 0; b < 2; ++b) {
              double s = 0;
              for (int i = 0; i < 3; ++i)
                for (int j = 0; j < 3; ++j) s += kSum[py][a][i] * kSum[px][b][j] * double(g[3 * i + j]);
              k2[a][b] = s;
            }
          const double t[3][2] = {{k2[0][0], k2[0][1]}, {k2[0][0] + k2[1][0], k2[0][1] + k2[1][1]}, {k2[1][0], k2[1][1]}};
          for (int i = 0; i < 3; ++i) {  // (G k) Gᵀ
            const double r[3] = {t[i][0], t[i][0] + t[i][1], t[i][1]};
            for (int k = 0; k < 3; ++k) u[((9 * (2 * py + px) + 3 * i + k) * C + c) * O + o] = float(r[k]);
          }
        }
    }
  });
}

}  // namespace dit::winograd
