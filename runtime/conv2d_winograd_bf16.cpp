#include "runtime/conv2d_winograd_bf16.h"

#include <algorithm>
#include <sstream>

#include "runtime/conv2d.h"
#include "runtime/error.h"
#include "runtime/packed_weights.h"
#include "runtime/parallel_for.h"
#include "runtime/tensor.h"
#include "runtime/winograd_bf16_transforms.h"

namespace dit {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

// A piece's V (bf16) and M (f32) tiles are kept near this many bytes, in cache between the input
// transform, the matmul and the output transform: 12 MB ran the decoder's matmuls in 0.69-0.77 s
// against 0.79-1.05 s with 6 MB on the 2-core VM (docs/vae.md, "bf16 by Winograd").
constexpr size_t kPieceBytes = size_t(12) << 20;

}  // namespace

std::unique_ptr<WinogradBf16Plan> WinogradBf16Plan::make(const Conv2dSpec& s, bool has_bias, Conv2dWorkspace& ws) {
  if (s.compute != DType::BF16 || !s.nhwc || s.kernel != 3 || s.stride != 1 || s.padding != 1 ||
      s.row_padding() > 1 || !compute_supported(DType::BF16))
    return nullptr;
  std::unique_ptr<WinogradBf16Plan> p(new WinogradBf16Plan());
  WinogradBf16Plan& m = *p;
  m.shape_ = Conv2dShape::of(s);
  m.pad_rows_ = s.row_padding();
  m.bf16_input_ = s.input == DType::BF16;
  m.accumulate_ = s.accumulate;
  // The outputs tiled: y's, or with a nearest-2x input the input's positions (each tile's
  // 2x2 of them make 4x4 outputs, four phases of 2x2).
  m.up_ = s.nearest2x_input;
  m.points_ = m.up_ ? winograd::kPointsUp2 : winograd::kPoints3x3;
  m.grid_h_ = m.up_ ? m.shape_.out_h / 2 : m.shape_.out_h;
  m.grid_w_ = m.up_ ? m.shape_.out_w / 2 : m.shape_.out_w;
  m.tiles_w_ = (m.grid_w_ + 1) / 2;
  m.phase_ = s.image_row & 1;  // tiles from even rows of the whole image: its first at grid row -phase_
  m.tiles_h_ = (m.grid_h_ + m.phase_ + 1) / 2;
  const size_t tile_bytes = size_t(m.points_ * (2 * m.shape_.in_c + 4 * m.shape_.out_c));
  const int64_t by_bytes = int64_t(kPieceBytes / (tile_bytes * size_t(m.tiles_w_)));
  const int64_t want = s.winograd_rows > 0 ? (s.winograd_rows + 1) / 2 : by_bytes;  // (grid rows)
  m.rows_t_ = std::clamp<int64_t>(want, 1, m.tiles_h_);
  m.tiles_ = m.rows_t_ * m.tiles_w_;
  for (int64_t t = 0; t + m.rows_t_ <= m.tiles_h_; t += m.rows_t_) m.steps_.push_back({t, t});
  if (m.tiles_h_ % m.rows_t_ != 0)  // the last full piece, written from where the others stopped
    m.steps_.push_back({m.tiles_h_ - m.rows_t_, m.steps_.empty() ? 0 : m.steps_.back().tile_row + m.rows_t_});
  m.rowp_.assign(size_t(2 * m.rows_t_ + 2), nullptr);
  m.zeros_.assign(size_t(std::max(m.shape_.in_c, m.shape_.out_c)), 0.f);
  m.row_source_ = s.winograd_row_source && m.pad_rows_ == 0 && s.batch == 1 && !m.up_;

  std::ostringstream what;
  what << "bf16 Winograd Conv2d x[" << s.batch << ", " << s.height << ", " << s.width << ", " << s.in_channels
       << "] -> " << s.out_channels << " channels";
  dnnl_call(what.str().c_str(), [&] {
    auto& eng = Engine::get().engine;
    m.v_plane_ = m.tiles_ * m.shape_.in_c;
    m.m_plane_ = m.tiles_ * m.shape_.out_c;
    const memory::desc v_md({m.points_, m.tiles_, m.shape_.in_c}, dt::bf16, tag::abc);
    const memory::desc w_any({m.points_, m.shape_.in_c, m.shape_.out_c}, dt::bf16, tag::any);
    const memory::desc m_md({m.points_, m.tiles_, m.shape_.out_c}, dt::f32, tag::abc);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(v_md, w_any, m_md), attr, eng);
    m.matmul_ = dnnl::matmul(pd);
    m.weights_md_ = pd.weights_desc();
    m.impl_name_ = std::string(m.up_ ? "winograd_up2_f2x2_2x2_bf16:" : "winograd_f2x2_bf16:") + pd.impl_info_str();
    m.v_ = memory(v_md, eng, nullptr);
    m.m_ = memory(m_md, eng, nullptr);
    m.v_bytes_ = (v_md.get_size() + 63) / 64 * 64;
    const size_t sp = pd.scratchpad_desc().get_size();
    if (sp) m.scratch_ = memory(pd.scratchpad_desc(), eng, nullptr);
    const int64_t rows_floats = (2 * m.rows_t_ + 2) * m.shape_.in_w * m.shape_.in_c;
    const size_t rows_buf = m.row_source_ ? size_t(rows_floats) * sizeof(float) : 0;
    ws.reserve(rows_buf, m_md.get_size(), m.v_bytes_ + sp);
  });
  (void)has_bias;
  return p;
}

// U for every (o, c) (runtime/winograd_bf16_transforms.h) as [points, C, O] f32, then into the
// matmul's layout in bf16 (rounded to nearest even by the reorder).
void WinogradBf16Plan::pack(const float* weight, void* dst) const {
  Tensor u = Tensor::empty({points_, shape_.in_c, shape_.out_c});
  if (up_)
    winograd::weights_up2(weight, shape_.in_c, shape_.out_c, u.f32());
  else
    winograd::weights_3x3(weight, shape_.in_c, shape_.out_c, u.f32());
  pack_weight(memory::desc({points_, shape_.in_c, shape_.out_c}, dt::f32, tag::abc), u.f32(), weights_md_, dst);
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
  const int64_t C = shape_.in_c, O = shape_.out_c, W = shape_.in_w;
  uint16_t* v = static_cast<uint16_t*>(ws.scratch());
  const float* mt = static_cast<const float*>(ws.dst());
  // Input transform, a band of whole tile rows per call: the tiles' 4x4 window pointers
  // (a row of zeros outside x), then V.
  parallel_for(rows_t_, true, [&](int64_t ty) {
    constexpr int kWin = winograd::kPoints3x3;
    const void* p[64 * kWin];
    for (int64_t x0 = 0; x0 < tiles_w_; x0 += 64) {
      const int64_t x1 = std::min(tiles_w_, x0 + 64);
      for (int64_t tx = x0; tx < x1; ++tx)
        for (int i = 0; i < 4; ++i) {
          const char* row = static_cast<const char*>(rowp_[size_t(2 * ty + i)]);
          for (int j = 0; j < 4; ++j) {
            const int64_t col = 2 * tx - 1 + j;
            const void* px = row && col >= 0 && col < W ? static_cast<const void*>(row + col * C * (bf16_rows ? 2 : 4))
                                                        : static_cast<const void*>(zeros_.data());
            p[(tx - x0) * kWin + 4 * i + j] = px;
          }
        }
      const int64_t t0 = ty * tiles_w_ + x0, t1 = ty * tiles_w_ + x1;
      const auto* pf = reinterpret_cast<const float* const*>(p);
      const auto* pb = reinterpret_cast<const uint16_t* const*>(p);
      if (up_)
        bf16_rows ? winograd::input_up2(pb, t0, t1, v_plane_, C, v) : winograd::input_up2(pf, t0, t1, v_plane_, C, v);
      else
        bf16_rows ? winograd::input_3x3(pb, t0, t1, v_plane_, C, v) : winograd::input_3x3(pf, t0, t1, v_plane_, C, v);
    }
  });
  execute(matmul_, Engine::get().stream, args_);  // M[k] = V[k] · U[k]
  Engine::get().stream.wait();
  // Output transform of the tile rows not yet written: y's 2x2 outputs at grid rows gy + a,
  // columns 2tx + b; with a nearest-2x input each phase's at y's rows 2(gy + a) + py, columns
  // 2(2tx + b) + px.
  const int64_t ks = m_plane_, first = step.write_from - step.tile_row;
  parallel_for(rows_t_ - first, true, [&](int64_t r) {
    const int64_t ty = first + r, gy = 2 * (step.tile_row + ty) - phase_;
    for (int64_t tx = 0; tx < tiles_w_; ++tx) {
      const float* mp = mt + (ty * tiles_w_ + tx) * O;
      for (int ph = 0; ph < (up_ ? 4 : 1); ++ph) {
        const int py = ph / 2, px = ph % 2;
        float* y[2][2];
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) {
            const int64_t gr = gy + a, gc = 2 * tx + b;
            const int64_t row = up_ ? 2 * gr + py : gr, col = up_ ? 2 * gc + px : gc;
            y[a][b] = gr >= 0 && gr < grid_h_ && gc < grid_w_ ? yn + (row * shape_.out_w + col) * O : nullptr;
          }
        if (up_)
          winograd::output_2x2(mp + 9 * ph * ks, ks, O, bias_, y, accumulate_);
        else
          winograd::output_3x3(mp, ks, O, bias_, y, accumulate_);
      }
    }
  });
}

void WinogradBf16Plan::run(const void* x, float* y, Conv2dWorkspace& ws) const {
  bind_buffers(ws);
  const size_t esz = bf16_input_ ? 2 : 4, row_bytes = size_t(shape_.in_w * shape_.in_c) * esz;
  for (int64_t n = 0; n < shape_.batch; ++n) {
    const char* xn = static_cast<const char*>(x) + size_t(n * shape_.in_h) * row_bytes;
    float* yn = y + n * shape_.out_h * shape_.out_w * shape_.out_c;
    for (const Step& step : steps_) {
      // Grid row r reads input rows r - pad_rows .. r - pad_rows + 2 (x's rows before the
      // upsampling with a nearest-2x input).
      const int64_t first = 2 * step.tile_row - phase_ - pad_rows_;
      for (size_t i = 0; i < rowp_.size(); ++i) {
        const int64_t r = first + int64_t(i);
        rowp_[i] = r >= 0 && r < shape_.in_h ? static_cast<const void*>(xn + size_t(r) * row_bytes) : nullptr;
      }
      run_piece(step, yn, ws, bf16_input_);
    }
  }
}

void WinogradBf16Plan::run_rows(const RowSource& x, float* y, Conv2dWorkspace& ws) const {
  DIT_CHECK(row_source_, "Conv2d::run_rows on a convolution not built for a row source (Conv2dSpec::winograd_row_source, batch 1, halo rows)");
  bind_buffers(ws);
  float* piece = static_cast<float*>(ws.src());
  const int64_t row = shape_.in_w * shape_.in_c;
  for (const Step& step : steps_) {
    // The piece's input rows, halo rows included; with an odd first image row the first tile's
    // top row is above x (zeros: only the output row above the band reads it).
    const int64_t first = 2 * step.tile_row - phase_, from = std::max<int64_t>(first, 0);
    const int64_t count = std::min<int64_t>(first + int64_t(rowp_.size()), shape_.in_h) - from;
    x.rows(from, count, piece);
    for (size_t i = 0; i < rowp_.size(); ++i) {
      const int64_t r = first + int64_t(i);
      rowp_[i] = r >= from && r < from + count ? static_cast<const void*>(piece + (r - from) * row) : nullptr;
    }
    run_piece(step, y, ws, false);  // the source's rows are f32
  }
}

}  // namespace dit
