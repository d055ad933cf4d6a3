#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "parallel/strided_block.h"
#include "parallel/sum_in_order.h"
#include "runtime/error.h"
#include "runtime/parallel_for.h"
#include "runtime/profile.h"

namespace dit {

namespace {

void grow(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

// The Row epilogue over this rank's rows, after or with the reduction: for row i of batch item
// b (y's row b·rows + i; row b·T + first + i of each of the n arrays), v = Σ_arrays (in
// order; n = 1: the sum the collectives made), v += bias, then y = v, y += v or y += gate ⊙ v.
// The window path passes every rank's partial products, so it sums in the reduce-scatter's
// order in the same pass: the same bits, without writing the sums out and reading them back.
void sum_rows_epilogue(const LinearSpec& s, const float* const* parts, size_t n, int64_t batch, int64_t rows,
                       int64_t T, int64_t first, const float* bias, const float* gate, float* y) {
  const int64_t N = s.out;
  parallel_for(batch * rows, batch * rows * N > 16384, [&](int64_t br) {
    const int64_t b = br / rows;
    const size_t at = size_t((b * T + first + br % rows) * N);
    const float* g = gate ? gate + b * N : nullptr;
    float* py = y + br * N;
    constexpr int64_t kCols = 256;
    float v[kCols];
    for (int64_t c0 = 0; c0 < N; c0 += kCols) {
      const int64_t m = std::min(kCols, N - c0);
      if (n == 1)
        std::memcpy(v, parts[0] + at + size_t(c0), size_t(m) * 4);
      else
        sum_in_order_serial(parts, n, at + size_t(c0), v, size_t(m));
      if (bias)
        for (int64_t j = 0; j < m; ++j) v[j] = v[j] + bias[c0 + j];
      float* yc = py + c0;
      if (s.gated_residual)
        for (int64_t j = 0; j < m; ++j) yc[j] += g[c0 + j] * v[j];
      else if (s.accumulate)
        for (int64_t j = 0; j < m; ++j) yc[j] = yc[j] + v[j];
      else
        std::memcpy(yc, v, size_t(m) * 4);
    }
  });
}

class DistributedTensorParallel;

// Column: this rank's output features; no communication.
class ColumnLinear final : public ParallelLinear {
 public:
  ColumnLinear(const LinearSpec& spec, const LinearWeight& w) : lin_(local(spec, w), w), out_(w.out()) {}
  void run(const float* x, float* y, const float*) override { lin_.run(x, y); }
  void run(const uint16_t* x, float* y, const float*) override { lin_.run(x, y); }
  int64_t out_local() const override { return out_; }
  static LinearSpec local(LinearSpec s, const LinearWeight& w) {
    DIT_CHECK(!s.gated_residual && !s.accumulate, "tensor parallel: a column-parallel linear has no residual");
    s.out = w.out();
    return s;
  }

 private:
  Linear lin_;
  int64_t out_;
};

// ColumnGather: Column, then the full output on every rank (each rank's columns gathered into
// every row in place: a strided all-gather with one plane per row).
class ColumnGatherLinear final : public ParallelLinear {
 public:
  ColumnGatherLinear(ProcessGroup& g, const LinearSpec& spec, const LinearWeight& w, const std::vector<TokenRange>& cols)
      : g_(g), lin_(ColumnLinear::local(spec, w), w), rows_(spec.batch * spec.rows), out_(spec.out) {
    for (const TokenRange& c : cols) counts_.push_back(size_t(c.size()));
    mine_.assign(size_t(rows_ * w.out()) + 1, 0.f);
  }
  void run(const float* x, float* y, const float*) override { run_any(x, y); }
  void run(const uint16_t* x, float* y, const float*) override { run_any(x, y); }
  int64_t out_local() const override { return out_; }

 private:
  template <class X>
  void run_any(const X* x, float* y) {
    lin_.run(x, mine_.data());
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(rows_) * counts_[size_t(g_.rank())] * 4 * uint64_t(g_.size() - 1));
    g_.all_gather_v(mine_.data(), y, counts_, size_t(rows_));  // [rows][cols of rank] -> [rows][out]
  }

  ProcessGroup& g_;
  Linear lin_;
  int64_t rows_, out_;
  std::vector<size_t> counts_;
  std::vector<float> mine_;
};

class RowLinear final : public ParallelLinear {
 public:
  RowLinear(DistributedTensorParallel& tp, const LinearSpec& spec, const LinearWeight& w);
  void run(const float* x, float* y, const float* gate) override { run_any(x, y, gate); }
  void run(const uint16_t* x, float* y, const float* gate) override { run_any(x, y, gate); }
  int64_t out_local() const override { return spec_.out; }

 private:
  template <class X>
  void run_any(const X* x, float* y, const float* gate);
  DistributedTensorParallel& tp_;
  LinearSpec spec_;
  Linear lin_;              // partial products over this rank's input features, no bias
  std::vector<float> bias_;
};

class DistributedTensorParallel final : public TensorParallel {
 public:
  DistributedTensorParallel(ProcessGroup& g, int64_t sp_min_tokens, bool allow_sp)
      : g_(g), sp_min_tokens_(sp_min_tokens), allow_sp_(allow_sp) {}

  TokenRange shard(int64_t dim, int64_t unit) const override {
    DIT_CHECK(unit >= 1 && dim % unit == 0, "tensor parallel: " << dim << " features are not whole units of " << unit);
    const int64_t units = dim / unit;
    DIT_CHECK(units >= g_.size(), "tensor parallel: " << units << (unit > 1 ? " attention heads" : " features")
                                                      << " cannot be split over " << g_.size() << " ranks");
    const TokenRange r = split_tokens(units, g_.size(), g_.rank());
    return {r.begin * unit, r.end * unit};
  }

  void prepare(int64_t batch, TokenRange tokens, int64_t dim) override {
    batch_ = batch;
    tokens_ = tokens;
    dim_ = dim;
    sp_ = allow_sp_ && g_.size() > 1 && batch * tokens.size() >= sp_min_tokens_;
    shards_.clear();
    for (const TokenRange& s : split_all(tokens.size(), g_.size()))
      shards_.push_back({tokens.begin + s.begin, tokens.begin + s.end});
    if (sp_) {
      counts_.clear();
      for (const TokenRange& s : shards_) counts_.push_back(size_t(s.size() * dim));
      full_.assign(size_t(batch * tokens.size() * dim) + 1, 0.f);
      full16_.assign(size_t(batch * tokens.size() * dim) + 1, 0);
      out_counts_.assign(shards_.size(), 0);
      // On one machine each rank's partial products [batch, tokens, dim] go straight into its
      // shared-memory window, where the others read their rows in place (collective: every TP
      // rank prepares the same shape).
      window_floats_ = g_.ensure_window(size_t(batch * tokens.size() * dim) * sizeof(float))
                           ? g_.window_bytes() / sizeof(float)
                           : 0;
      sum_inputs_.assign(size_t(g_.size()), nullptr);
    }
  }
  TokenRange residual() const override { return sp_ ? shards_[size_t(g_.rank())] : tokens_; }
  bool sequence_parallel() const { return sp_; }

  float* gather_buffer(float* own) override { return gather_buffer_any(own); }
  uint16_t* gather_buffer(uint16_t* own) override { return gather_buffer_any(own); }
  const float* gather(const float* rows) override { return gather_any(rows, full_.data()); }
  const uint16_t* gather(const uint16_t* rows) override { return gather_any(rows, full16_.data()); }

  std::unique_ptr<ParallelLinear> linear(Split split, const LinearSpec& spec, const LinearWeight& w) override {
    switch (split) {
      case Split::Replicated: return make_local_linear(spec, w);
      case Split::Column: return std::make_unique<ColumnLinear>(spec, w);
      case Split::ColumnGather: {
        std::vector<TokenRange> cols;
        for (int r = 0; r < g_.size(); ++r) {
          const TokenRange u = split_tokens(spec.out, g_.size(), r);
          cols.push_back(u);
        }
        DIT_CHECK(cols[size_t(g_.rank())].size() == w.out(),
                  "tensor parallel: a gathered column shard of " << w.out() << " features, expected "
                                                                 << cols[size_t(g_.rank())].size());
        return std::make_unique<ColumnGatherLinear>(g_, spec, w, cols);
      }
      case Split::Row: return std::make_unique<RowLinear>(*this, spec, w);
    }
    DIT_FAIL("tensor parallel: unknown split");
  }

  void all_reduce(float* data, int64_t n) override {
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(n) * 4 * uint64_t(g_.size() - 1));
    g_.all_reduce_sum(data, size_t(n));
  }

  std::string describe(int64_t heads, int64_t ffn) const override {
    std::ostringstream os;
    const TokenRange h = split_tokens(heads, g_.size(), g_.rank()), f = split_tokens(ffn, g_.size(), g_.rank());
    os << "tp " << g_.rank() << " of " << g_.size() << ": heads [" << h.begin << ", " << h.end << "), FFN columns ["
       << f.begin << ", " << f.end << ")";
    return os.str();
  }

  // Row: the sum of every rank's partial [batch, tokens, out] into `mine` — all of it
  // (all-reduce), or this rank's residual rows (a reduce-scatter over the token rows of each
  // batch item, summed in rank order).
  void reduce(float* partial, std::vector<float>& mine, int64_t out, float*& result, int64_t& rows) {
    profile::Scope pc(profile::Cat::Communication);
    const int64_t T = tokens_.size();
    if (!sp_) {
      profile::add_bytes(uint64_t(batch_ * T * out) * 4);
      g_.all_reduce_sum(partial, size_t(batch_ * T * out));
      result = partial;
      rows = T;
      return;
    }
    // [batch][tokens][out] -> this rank's rows [batch][rows of this rank][out], summed over the ranks
    const TokenRange my = shards_[size_t(g_.rank())];
    for (size_t j = 0; j < shards_.size(); ++j) out_counts_[j] = size_t(shards_[j].size() * out);
    grow(mine, size_t(batch_ * my.size() * out) + 1);  // first use only: no allocation in later steps
    profile::add_bytes(uint64_t(batch_ * (T - my.size()) * out) * 4);
    g_.reduce_scatter_sum_v(partial, mine.data(), out_counts_, size_t(batch_));
    result = mine.data();
    rows = my.size();
  }
  int64_t batch() const { return batch_; }
  // Row, on one machine under Megatron SP: where a row-parallel layer of `floats` partial
  // products [batch, tokens, out] writes them, in place of partial() and reduce() — this
  // rank's window, once the others have read its last use; null where there is no window.
  bool windowed(size_t floats) const { return sp_ && floats <= window_floats_; }  // the same on every rank
  float* window_partial(size_t floats) {
    if (!windowed(floats)) return nullptr;
    profile::Scope pc(profile::Cat::Communication);
    return g_.window_begin();
  }
  // ... then this rank's rows of the sum over the ranks' windows, in rank order (the bits
  // reduce() gives), with the Row epilogue into y (sum_rows_epilogue).
  void reduce_windows(const LinearSpec& spec, const float* bias, const float* gate, float* y) {
    profile::Scope pc(profile::Cat::Communication);
    const int64_t T = tokens_.size();
    const TokenRange my = shards_[size_t(g_.rank())];
    profile::add_bytes(uint64_t(batch_ * (T - my.size()) * spec.out) * 4);
    g_.window_publish();
    for (int j = 0; j < g_.size(); ++j) sum_inputs_[size_t(j)] = g_.window_peer(j);
    sum_rows_epilogue(spec, sum_inputs_.data(), sum_inputs_.size(), batch_, my.size(), T, my.begin - tokens_.begin,
                      bias, gate, y);
    g_.window_release();
  }
  // Buffers every row-parallel layer of this object shares (the layers run one at a time):
  // the partial products [batch, tokens, out] and this rank's reduced rows.
  float* partial(size_t n) {
    grow(partial_, n);
    return partial_.data();
  }
  std::vector<float>& mine() { return mine_; }

 private:
  template <class T>
  T* gather_buffer_any(T* own) {
    if (!windowed(size_t(batch_ * tokens_.size() * dim_))) return own;  // (the same on every rank)
    profile::Scope pc(profile::Cat::Communication);
    pending_ = g_.window_begin();  // the others have read its last use
    return reinterpret_cast<T*>(pending_);
  }

  // [batch][rows of this rank][dim] from every rank -> full [batch][tokens][dim]
  template <class T>
  const T* gather_any(const T* rows, T* full) {
    if (!sp_) return rows;
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(batch_) * counts_[size_t(g_.rank())] * sizeof(T) * uint64_t(g_.size() - 1));
    if (!pending_) {
      g_.all_gather_v(rows, full, counts_, size_t(batch_));
      return full;
    }
    DIT_CHECK(static_cast<const void*>(rows) == static_cast<const void*>(pending_),
              "tensor parallel: gather() of rows that are not in gather_buffer()");
    pending_ = nullptr;
    g_.window_publish();
    const size_t T_ = size_t(tokens_.size() * dim_);
    for (int k = 0; k < g_.size(); ++k) {  // its own rows first: they need no wait
      const int j = (g_.rank() + k) % g_.size();
      const size_t n = counts_[size_t(j)], at = size_t(shards_[size_t(j)].begin - tokens_.begin) * size_t(dim_);
      copy_block_parallel(reinterpret_cast<const T*>(g_.window_peer(j)), StridedBlock{0, size_t(batch_), n, n}, 0,
                          full, StridedBlock{at, size_t(batch_), n, T_}, 0, size_t(batch_) * n);
    }
    g_.window_release();
    return full;
  }

  ProcessGroup& g_;
  int64_t sp_min_tokens_;
  bool allow_sp_;
  bool sp_ = false;
  int64_t batch_ = 0, dim_ = 0;
  TokenRange tokens_;
  std::vector<TokenRange> shards_;
  std::vector<size_t> counts_, out_counts_;  // per rank: residual features of a token row, a Row linear's outputs
  std::vector<float> full_, partial_, mine_;
  std::vector<uint16_t> full16_;            // gather() of bf16 rows
  size_t window_floats_ = 0;                // this rank's shared-memory window (0: none)
  float* pending_ = nullptr;                // gather_buffer() handed out the window
  std::vector<const float*> sum_inputs_;  // every rank's window, in rank order
};

RowLinear::RowLinear(DistributedTensorParallel& tp, const LinearSpec& spec, const LinearWeight& w)
    : tp_(tp), spec_(spec) {
  DIT_CHECK(spec.act == Act::None, "tensor parallel: a row-parallel linear has no activation");
  DIT_CHECK(!spec.gated_residual || spec.batch == tp.batch(),
            "tensor parallel: a gated row-parallel linear must be [batch, tokens] (one gate per sequence)");
  LinearSpec local = spec;
  local.in = w.in();
  local.gated_residual = local.accumulate = false;
  LinearWeight nobias = w;  // the bias is added once, after the reduction
  nobias.bias = Tensor();
  lin_ = Linear(local, nobias);
  if (w.bias.defined()) bias_.assign(w.bias.f32(), w.bias.f32() + w.bias.numel());
  const size_t n = size_t(spec.batch * spec.rows * spec.out);
  if (!tp_.windowed(n)) tp_.partial(n + 1);  // sized once, before the loop
}

template <class X>
void RowLinear::run_any(const X* x, float* y, const float* gate) {
  DIT_CHECK(!spec_.gated_residual || gate, "tensor parallel: a gated row-parallel linear needs its gate");
  const size_t n = size_t(spec_.batch * spec_.rows * spec_.out);
  const float* bias = bias_.empty() ? nullptr : bias_.data();
  if (float* w = tp_.window_partial(n)) {
    lin_.run(x, w);
    return tp_.reduce_windows(spec_, bias, gate, y);
  }
  float* partial = tp_.partial(n + 1);
  lin_.run(x, partial);
  float* sum = nullptr;
  int64_t rows = 0;
  tp_.reduce(partial, tp_.mine(), spec_.out, sum, rows);
  // [batch, rows, out] whatever batch × rows the spec was written with
  const float* sums[1] = {sum};
  sum_rows_epilogue(spec_, sums, 1, tp_.batch(), rows, rows, 0, bias, gate, y);
}

}  // namespace

std::unique_ptr<TensorParallel> make_distributed_tensor_parallel(ProcessGroup& group, int64_t sp_min_tokens,
                                                                 bool allow_sequence_parallel) {
  return std::make_unique<DistributedTensorParallel>(group, sp_min_tokens, allow_sequence_parallel);
}

}  // namespace dit
