#include "runtime/conv2d_winograd_bf16.h"

#include <algorithm>
#include <sstream>

#include "runtime/conv2d.h"
#include "runtime/error.h"
#include "runtime/packed_weights.h"
#include "runtime/parallel_for.h"
#include "runtime/simd_math.h"
#include "runtime/tensor.h"

namespace dit {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

constexpr int64_t kPoints = 16;  // a 4×4 input tile: 16 products per channel pair
// A piece's V (bf16) and M (f32) tiles are kept near this many bytes: they stay in cache between
// the input transform, the matmul and the output transform (docs/vae.md, "bf16 by Winograd").
constexpr size_t kPieceBytes = size_t(12) << 20;

inline float load(const float* p, int64_t c) { return p[c]; }
inline float load(const uint16_t* p, int64_t c) { return bf16_to_f32(p[c]); }

// V = Bᵀ d B for the tiles [t0, t1) of a piece, Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]:
// tile t's 4×4 pixels are p[16·(t - t0) + 4i + j] (rows i, columns j; C values each), its 16
// results go to v[k·ks + t·C + c] in bf16.
template <class T>
DIT_MULTIVERSION void input_transform(const T* const* p, int64_t t0, int64_t t1, int64_t ks, int64_t C, uint16_t* v) {
  for (int64_t t = t0; t < t1; ++t) {
    const T* const* q = p + kPoints * (t - t0);
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

// Aᵀ M A + b for output channel o of one tile, Aᵀ = [1 1 1 0; 0 1 -1 -1]: M[k·ks + o].
static inline __attribute__((always_inline)) void tile_out(const float* m, int64_t ks, int64_t o, float b, float& r00,
                                                           float& r01, float& r10, float& r11) {
  float a0[4], a1[4];  // Aᵀ M
  for (int j = 0; j < 4; ++j) {
    const float m0 = m[j * ks + o], m1 = m[(4 + j) * ks + o], m2 = m[(8 + j) * ks + o], m3 = m[(12 + j) * ks + o];
    a0[j] = m0 + m1 + m2;
    a1[j] = m1 - m2 - m3;
  }
  r00 = a0[0] + a0[1] + a0[2] + b;  // (Aᵀ M) A
  r01 = a0[1] - a0[2] - a0[3] + b;
  r10 = a1[0] + a1[1] + a1[2] + b;
  r11 = a1[1] - a1[2] - a1[3] + b;
}

// y = Aᵀ M A + b (+ y) for one tile whose 2×2 outputs y[i][j] are all inside the image.
template <bool kAccumulate>
DIT_MULTIVERSION void output_transform(const float* m, int64_t ks, int64_t O, const float* bias, float* y00,
                                       float* y01, float* y10, float* y11) {
#pragma omp simd
  for (int64_t o = 0; o < O; ++o) {
    float r00, r01, r10, r11;
    tile_out(m, ks, o, bias[o], r00, r01, r10, r11);
    y00[o] = kAccumulate ? y00[o] + r00 : r00;
    y01[o] = kAccumulate ? y01[o] + r01 : r01;
    y10[o] = kAccumulate ? y10[o] + r10 : r10;
    y11[o] = kAccumulate ? y11[o] + r11 : r11;
  }
}

// The same for a tile on the bottom or right edge: outputs outside the image are null.
void output_transform_edge(const float* m, int64_t ks, int64_t O, const float* bias, float* const y[2][2],
                           bool accumulate) {
  for (int64_t o = 0; o < O; ++o) {
    float r[2][2];
    tile_out(m, ks, o, bias[o], r[0][0], r[0][1], r[1][0], r[1][1]);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        if (float* p = y[i][j]) p[o] = accumulate ? p[o] + r[i][j] : r[i][j];
  }
}

}  // namespace

std::unique_ptr<WinogradBf16Plan> WinogradBf16Plan::make(const Conv2dSpec& s, bool has_bias, Conv2dWorkspace& ws) {
  if (s.compute != DType::BF16 || !s.nhwc || s.kernel != 3 || s.stride != 1 || s.padding != 1 ||
      s.row_padding() > 1 || !compute_supported(DType::BF16))
    return nullptr;
  std::unique_ptr<WinogradBf16Plan> p(new WinogradBf16Plan());
  WinogradBf16Plan& m = *p;
  m.batch_ = s.batch;
  m.in_h_ = s.height;
  m.in_w_ = s.width;
  m.in_c_ = s.in_channels;
  m.out_h_ = s.out_height();
  m.out_w_ = s.out_width();
  m.out_c_ = s.out_channels;
  m.pad_rows_ = s.row_padding();
  m.bf16_input_ = s.input == DType::BF16;
  m.accumulate_ = s.accumulate;
  m.tiles_w_ = (m.out_w_ + 1) / 2;
  m.phase_ = s.image_row & 1;  // tiles from even rows of the whole image: its first at output row -phase_
  m.tiles_h_ = (m.out_h_ + m.phase_ + 1) / 2;
  const size_t tile_bytes = size_t(kPoints * (2 * m.in_c_ + 4 * m.out_c_));
  const int64_t by_bytes = int64_t(kPieceBytes / (tile_bytes * size_t(m.tiles_w_)));
  const int64_t want = s.winograd_rows > 0 ? (s.winograd_rows + 1) / 2 : by_bytes;
  m.rows_t_ = std::clamp<int64_t>(want, 1, m.tiles_h_);
  m.tiles_ = m.rows_t_ * m.tiles_w_;
  for (int64_t t = 0; t + m.rows_t_ <= m.tiles_h_; t += m.rows_t_) m.steps_.push_back({t, t});
  if (m.tiles_h_ % m.rows_t_ != 0)  // the last full piece, written from where the others stopped
    m.steps_.push_back({m.tiles_h_ - m.rows_t_, m.steps_.empty() ? 0 : m.steps_.back().tile_row + m.rows_t_});
  m.rowp_.assign(size_t(2 * m.rows_t_ + 2), nullptr);
  m.zeros_.assign(size_t(std::max(m.in_c_, m.out_c_)), 0.f);
  m.row_source_ = s.winograd_row_source && m.pad_rows_ == 0 && s.batch == 1;

  std::ostringstream what;
  what << "bf16 Winograd Conv2d x[" << s.batch << ", " << s.height << ", " << s.width << ", " << s.in_channels
       << "] -> " << s.out_channels << " channels";
  dnnl_call(what.str().c_str(), [&] {
    auto& eng = Engine::get().engine;
    m.v_plane_ = m.tiles_ * m.in_c_;
    m.m_plane_ = m.tiles_ * m.out_c_;
    const memory::desc v_md({kPoints, m.tiles_, m.in_c_}, dt::bf16, tag::abc);
    const memory::desc w_any({kPoints, m.in_c_, m.out_c_}, dt::bf16, tag::any);
    const memory::desc m_md({kPoints, m.tiles_, m.out_c_}, dt::f32, tag::abc);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(v_md, w_any, m_md), attr, eng);
    m.matmul_ = dnnl::matmul(pd);
    m.weights_md_ = pd.weights_desc();
    m.impl_name_ = "winograd_f2x2_bf16:" + std::string(pd.impl_info_str());
    m.v_ = memory(v_md, eng, nullptr);
    m.m_ = memory(m_md, eng, nullptr);
    m.v_bytes_ = (v_md.get_size() + 63) / 64 * 64;
    const size_t sp = pd.scratchpad_desc().get_size();
    if (sp) m.scratch_ = memory(pd.scratchpad_desc(), eng, nullptr);
    const size_t rows_buf = m.row_source_ ? size_t((2 * m.rows_t_ + 2) * m.in_w_ * m.in_c_) * sizeof(float) : 0;
    ws.reserve(rows_buf, m_md.get_size(), m.v_bytes_ + sp);
  });
  (void)has_bias;
  return p;
}

// U = G g Gᵀ for every (o, c), G = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1], in double, as [16, C, O] f32,
// then into the matmul's layout in bf16 (rounded to nearest even by the reorder).
void WinogradBf16Plan::pack(const float* weight, void* dst) const {
  const int64_t C = in_c_, O = out_c_;
  Tensor u = Tensor::empty({kPoints, C, O});
  float* up = u.f32();
  parallel_for(O, true, [&](int64_t o) {
    for (int64_t c = 0; c < C; ++c) {
      const float* g = weight + (o * C + c) * 9;
      double t[4][3];  // G g
      for (int j = 0; j < 3; ++j) {
        t[0][j] = g[j];
        t[1][j] = (double(g[j]) + g[3 + j] + g[6 + j]) / 2;
        t[2][j] = (double(g[j]) - g[3 + j] + g[6 + j]) / 2;
        t[3][j] = g[6 + j];
      }
      for (int i = 0; i < 4; ++i) {  // (G g) Gᵀ
        const double r[4] = {t[i][0], (t[i][0] + t[i][1] + t[i][2]) / 2, (t[i][0] - t[i][1] + t[i][2]) / 2, t[i][2]};
        for (int k = 0; k < 4; ++k) up[((4 * i + k) * C + c) * O + o] = float(r[k]);
      }
    }
  });
  pack_weight(memory::desc({kPoints, C, O}, dt::f32, tag::abc), up, weights_md_, dst);
}

void WinogradBf16Plan::bind(const void* weight, const float* bias) {
  auto& eng = Engine::get().engine;
  w_ = memory(weights_md_, eng, const_cast<void*>(weight));
  bias_ = bias ? bias : zeros_.data();
  args_ = {{DNNL_ARG_SRC, v_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DST, m_}};
  if (scratch_) args_[DNNL_ARG_SCRATCHPAD] = scratch_;
}

// Bound at every run: a convolution built later may have grown the shared workspace.
void WinogradBf16Plan::bind_buffers(Conv2dWorkspace& ws) const {
  v_.set_data_handle(ws.scratch());
  m_.set_data_handle(ws.dst());
  if (scratch_) scratch_.set_data_handle(static_cast<char*>(ws.scratch()) + v_bytes_);
}

void WinogradBf16Plan::run_piece(const Step& step, float* yn, Conv2dWorkspace& ws, bool bf16_rows) const {
  const int64_t C = in_c_, O = out_c_, W = in_w_;
  uint16_t* v = static_cast<uint16_t*>(ws.scratch());
  const float* mt = static_cast<const float*>(ws.dst());
  // Input transform, a band of whole tile rows per call: the tiles' 16 pixel pointers
  // (a row of zeros outside x), then V.
  parallel_for(rows_t_, true, [&](int64_t ty) {
    const void* p[64 * kPoints];
    for (int64_t x0 = 0; x0 < tiles_w_; x0 += 64) {
      const int64_t x1 = std::min(tiles_w_, x0 + 64);
      for (int64_t tx = x0; tx < x1; ++tx)
        for (int i = 0; i < 4; ++i) {
          const char* row = static_cast<const char*>(rowp_[size_t(2 * ty + i)]);
          for (int j = 0; j < 4; ++j) {
            const int64_t col = 2 * tx - 1 + j;
            const void* px = row && col >= 0 && col < W ? static_cast<const void*>(row + col * C * (bf16_rows ? 2 : 4))
                                                        : static_cast<const void*>(zeros_.data());
            p[(tx - x0) * kPoints + 4 * i + j] = px;
          }
        }
      const int64_t t0 = ty * tiles_w_ + x0, t1 = ty * tiles_w_ + x1;
      if (bf16_rows)
        input_transform(reinterpret_cast<const uint16_t* const*>(p), t0, t1, v_plane_, C, v);
      else
        input_transform(reinterpret_cast<const float* const*>(p), t0, t1, v_plane_, C, v);
    }
  });
  execute(matmul_, Engine::get().stream, args_);  // M[k] = V[k] · U[k]
  Engine::get().stream.wait();
  // Output transform of the tile rows not yet written.
  const int64_t ks = m_plane_, first = step.write_from - step.tile_row;
  parallel_for(rows_t_ - first, true, [&](int64_t r) {
    const int64_t ty = first + r, oy = 2 * (step.tile_row + ty) - phase_;
    for (int64_t tx = 0; tx < tiles_w_; ++tx) {
      float* y[2][2];
      bool whole = true;
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
          const int64_t row = oy + i, col = 2 * tx + j;
          y[i][j] = row >= 0 && row < out_h_ && col < out_w_ ? yn + (row * out_w_ + col) * O : nullptr;
          whole = whole && y[i][j];
        }
      const float* mp = mt + (ty * tiles_w_ + tx) * O;
      if (!whole)
        output_transform_edge(mp, ks, O, bias_, y, accumulate_);
      else if (accumulate_)
        output_transform<true>(mp, ks, O, bias_, y[0][0], y[0][1], y[1][0], y[1][1]);
      else
        output_transform<false>(mp, ks, O, bias_, y[0][0], y[0][1], y[1][0], y[1][1]);
    }
  });
}

void WinogradBf16Plan::run(const void* x, float* y, Conv2dWorkspace& ws) const {
  bind_buffers(ws);
  const size_t esz = bf16_input_ ? 2 : 4, row_bytes = size_t(in_w_ * in_c_) * esz;
  for (int64_t n = 0; n < batch_; ++n) {
    const char* xn = static_cast<const char*>(x) + size_t(n * in_h_) * row_bytes;
    float* yn = y + n * out_h_ * out_w_ * out_c_;
    for (const Step& step : steps_) {
      // Output row r reads input rows r - pad_rows .. r - pad_rows + 2.
      const int64_t first = 2 * step.tile_row - phase_ - pad_rows_;
      for (size_t i = 0; i < rowp_.size(); ++i) {
        const int64_t r = first + int64_t(i);
        rowp_[i] = r >= 0 && r < in_h_ ? static_cast<const void*>(xn + size_t(r) * row_bytes) : nullptr;
      }
      run_piece(step, yn, ws, bf16_input_);
    }
  }
}

void WinogradBf16Plan::run_rows(const RowSource& x, float* y, Conv2dWorkspace& ws) const {
  DIT_CHECK(row_source_, "Conv2d::run_rows on a convolution not built for a row source (Conv2dSpec::winograd_row_source, batch 1, halo rows)");
  bind_buffers(ws);
  float* piece = static_cast<float*>(ws.src());
  const int64_t row = in_w_ * in_c_;
  for (const Step& step : steps_) {
    // The piece's input rows, halo rows included; with an odd first image row the first tile's
    // top row is above x (zeros: only the output row above the band reads it).
    const int64_t first = 2 * step.tile_row - phase_, from = std::max<int64_t>(first, 0);
    const int64_t count = std::min<int64_t>(first + int64_t(rowp_.size()), in_h_) - from;
    x.rows(from, count, piece);
    for (size_t i = 0; i < rowp_.size(); ++i) {
      const int64_t r = first + int64_t(i);
      rowp_[i] = r >= from && r < from + count ? static_cast<const void*>(piece + (r - from) * row) : nullptr;
    }
    run_piece(step, y, ws, false);  // the source's rows are f32
  }
}

}  // namespace dit
