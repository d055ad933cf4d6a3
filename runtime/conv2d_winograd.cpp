#include "runtime/conv2d_winograd.h"

#include <algorithm>
#include <sstream>

#include "runtime/conv2d.h"
#include "runtime/conv2d_winograd_bf16.h"
#include "runtime/error.h"
#include "runtime/packed_weights.h"

namespace dit {

using dnnl::memory;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

namespace {

// About this many output pixels a piece: 16384 ran at 0.95-1.1x the speed of one call over the
// whole image on the 2-core VM (128-512 channels), 4096 at 0.7-0.8x (docs/vae.md).
constexpr int64_t kPiecePixels = 16384;
// A piece's scratch (its transformed input and output tiles) is kept under this by fewer rows.
constexpr size_t kMaxScratch = size_t(64) << 20;
constexpr int64_t kTile = 4;  // output rows of one Winograd tile

int64_t default_piece_rows(int64_t out_w) {
  return std::max<int64_t>(kTile, kPiecePixels / std::max<int64_t>(out_w, 1) / kTile * kTile);
}

}  // namespace

WinogradPlan::~WinogradPlan() = default;

std::unique_ptr<WinogradConv> make_winograd(const Conv2dSpec& s, bool has_bias, Conv2dWorkspace& ws) {
  if (s.compute == DType::BF16) return WinogradBf16Plan::make(s, has_bias, ws);
  return WinogradPlan::make(s, has_bias, ws);
}

void WinogradPlan::pack(const float* weight, void* dst) const {
  const memory::desc user({shape_.out_c, shape_.in_c, 3, 3}, dt::f32, tag::oihw);
  pack_weight(user, weight, weights_md_, dst);
}

bool winograd_available() {
  static const bool available = [] {
    Conv2dSpec s;
    s.in_channels = s.out_channels = 16;
    s.height = s.width = 8;
    s.nhwc = true;
    Conv2dWorkspace ws;
    return WinogradPlan::make(s, false, ws) != nullptr;
  }();
  return available;
}

std::unique_ptr<WinogradPlan> WinogradPlan::make(const Conv2dSpec& s, bool has_bias, Conv2dWorkspace& ws) {
  if (s.compute != DType::F32 || s.input != DType::F32 || !s.nhwc || s.kernel != 3 || s.stride != 1 ||
      s.padding != 1 || s.nearest2x_input)
    return nullptr;
  std::unique_ptr<WinogradPlan> p(new WinogradPlan());
  WinogradPlan& m = *p;
  m.shape_ = Conv2dShape::of(s);
  m.halo_ = s.row_padding() == 0;
  int64_t rows = m.shape_.out_h;
  if (m.halo_)
    rows = std::min(m.shape_.out_h, s.winograd_rows > 0 ? s.winograd_rows : default_piece_rows(m.shape_.out_w));
  std::ostringstream what;
  what << "Winograd Conv2d x[" << s.batch << ", " << s.height << ", " << s.width << ", " << s.in_channels << "] -> "
       << s.out_channels << " channels";
  auto& eng = Engine::get().engine;
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const memory::desc b_md({s.out_channels}, dt::f32, tag::a);
  const memory::desc w_any({s.out_channels, s.in_channels, 3, 3}, dt::f32, tag::any);
  dnnl::convolution_forward::primitive_desc pd;
  for (;;) {
    const int64_t in_rows = m.halo_ ? rows + 2 : m.shape_.in_h;
    const memory::dims pad{m.halo_ ? 0 : s.row_padding(), 1};
    const memory::desc src_any({1, s.in_channels, in_rows, s.width}, dt::f32, tag::any);
    const memory::desc dst_any({1, s.out_channels, rows, m.shape_.out_w}, dt::f32, tag::any);
    try {
      auto d = has_bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                          dnnl::algorithm::convolution_winograd, src_any, w_any, b_md,
                                                          dst_any, {1, 1}, pad, pad)
                        : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                          dnnl::algorithm::convolution_winograd, src_any, w_any,
                                                          dst_any, {1, 1}, pad, pad);
      pd = dnnl::convolution_forward::primitive_desc(d, attr, eng);
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_unimplemented) return nullptr;  // no Winograd kernel for this CPU or shape
      rethrow_dnnl(what.str().c_str(), e);
    }
    if (!m.halo_ || rows <= kTile || pd.scratchpad_desc().get_size() <= kMaxScratch) break;
    rows = std::max(kTile, rows / 2 / kTile * kTile);
  }
  m.rows_ = rows;
  m.impl_name_ = pd.impl_info_str();
  m.weights_md_ = pd.weights_desc();
  dnnl_call(what.str().c_str(), [&] {
    m.conv_ = dnnl::convolution_forward(pd);
    const int64_t in_rows = m.halo_ ? rows + 2 : m.shape_.in_h;
    m.user_src_ = memory(memory::desc({1, s.in_channels, in_rows, s.width}, dt::f32, tag::nhwc), eng, nullptr);
    m.src_ = memory(pd.src_desc(), eng, nullptr);
    m.dst_ = memory(pd.dst_desc(), eng, nullptr);
    m.user_dst_ = memory(memory::desc({1, s.out_channels, rows, m.shape_.out_w}, dt::f32, tag::nhwc), eng, nullptr);
    dnnl::primitive_attr out_attr;  // y = conv(x) + b (+ y: the residual added on the way out)
    if (s.accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.f);
      out_attr.set_post_ops(po);
    }
    m.src_in_ = dnnl::reorder(m.user_src_, m.src_);
    m.src_in_args_ = {{DNNL_ARG_FROM, m.user_src_}, {DNNL_ARG_TO, m.src_}};
    m.dst_out_ = dnnl::reorder(dnnl::reorder::primitive_desc(m.dst_, m.user_dst_, out_attr));
    m.dst_out_args_ = {{DNNL_ARG_FROM, m.dst_}, {DNNL_ARG_TO, m.user_dst_}};
    for (int64_t r0 = 0; r0 + rows <= m.shape_.out_h; r0 += rows) m.steps_.push_back({r0, false});
    m.tail_rows_ = m.shape_.out_h % rows;
    if (m.tail_rows_ > 0) {  // the last `rows` rows; the first rows - tail of them are written already
      m.steps_.push_back({m.shape_.out_h - rows, true});
      const memory::dims tail_dims{1, s.out_channels, m.tail_rows_, m.shape_.out_w};
      m.dst_tail_view_ = memory(pd.dst_desc().submemory_desc(tail_dims, {0, 0, rows - m.tail_rows_, 0}), eng, nullptr);
      m.user_tail_ = memory(memory::desc(tail_dims, dt::f32, tag::nhwc), eng, nullptr);
      m.tail_out_ = dnnl::reorder(dnnl::reorder::primitive_desc(m.dst_tail_view_, m.user_tail_, out_attr));
      m.tail_out_args_ = {{DNNL_ARG_FROM, m.dst_tail_view_}, {DNNL_ARG_TO, m.user_tail_}};
    }
    const size_t sp = pd.scratchpad_desc().get_size();
    if (sp) m.scratch_ = memory(pd.scratchpad_desc(), eng, nullptr);
    // With a row source the piece's input rows are made in the blocked output's buffer, which
    // is free until the convolution writes it (after the input's reorder has read them).
    m.row_source_ = s.winograd_row_source && m.halo_ && s.batch == 1;
    const size_t piece = m.row_source_ ? size_t(in_rows * s.width * s.in_channels) * sizeof(float) : 0;
    ws.reserve(pd.src_desc().get_size(), std::max(pd.dst_desc().get_size(), piece), sp);
  });
  return p;
}

void WinogradPlan::bind(const void* weight, const float* bias) {
  auto& eng = Engine::get().engine;
  conv_args_ = {{DNNL_ARG_SRC, src_},
                {DNNL_ARG_WEIGHTS, memory(weights_md_, eng, const_cast<void*>(weight))},
                {DNNL_ARG_DST, dst_}};
  if (bias)
    conv_args_[DNNL_ARG_BIAS] = memory(memory::desc({shape_.out_c}, dt::f32, tag::a), eng, const_cast<float*>(bias));
  if (scratch_) conv_args_[DNNL_ARG_SCRATCHPAD] = scratch_;
}

// Bound at every run: a convolution built later may have grown the shared workspace.
void WinogradPlan::bind_buffers(Conv2dWorkspace& ws) const {
  src_.set_data_handle(ws.src());
  dst_.set_data_handle(ws.dst());
  if (dst_tail_view_) dst_tail_view_.set_data_handle(ws.dst());
  if (scratch_) scratch_.set_data_handle(ws.scratch());
}

// One piece whose input rows user_src_ points at: reordered in, convolved, reordered out into yn.
void WinogradPlan::run_piece(const Step& step, float* yn) const {
  auto& st = Engine::get().stream;
  execute(src_in_, st, src_in_args_);
  execute(conv_, st, conv_args_);
  if (step.tail) {
    user_tail_.set_data_handle(yn + (shape_.out_h - tail_rows_) * shape_.out_w * shape_.out_c);
    execute(tail_out_, st, tail_out_args_);
  } else {
    user_dst_.set_data_handle(yn + step.out_row * shape_.out_w * shape_.out_c);
    execute(dst_out_, st, dst_out_args_);
  }
}

void WinogradPlan::run(const void* xv, float* y, Conv2dWorkspace& ws) const {
  bind_buffers(ws);
  const float* x = static_cast<const float*>(xv);
  for (int64_t n = 0; n < shape_.batch; ++n) {
    const float* xn = x + n * shape_.in_h * shape_.in_w * shape_.in_c;
    float* yn = y + n * shape_.out_h * shape_.out_w * shape_.out_c;
    for (const Step& step : steps_) {
      // Input rows of output row r: r .. r + 2 in the halo form; the whole image otherwise.
      user_src_.set_data_handle(const_cast<float*>(xn + (halo_ ? step.out_row : 0) * shape_.in_w * shape_.in_c));
      run_piece(step, yn);
    }
  }
  Engine::get().stream.wait();
}

void WinogradPlan::run_rows(const RowSource& x, float* y, Conv2dWorkspace& ws) const {
  DIT_CHECK(row_source_, "Conv2d::run_rows on a convolution not built for a row source (Conv2dSpec::winograd_row_source, batch 1, halo rows)");
  bind_buffers(ws);
  float* piece = static_cast<float*>(ws.dst());  // free until the convolution writes it
  user_src_.set_data_handle(piece);
  for (const Step& step : steps_) {
    x.rows(step.out_row, rows_ + 2, piece);  // the piece's input rows, halo rows included
    run_piece(step, y);
  }
  Engine::get().stream.wait();
}

}  // namespace dit
