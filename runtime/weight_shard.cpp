#include "runtime/weight_shard.h"

#include <cstring>

#include "runtime/error.h"

namespace dit {

LinearWeight shard_rows(const Tensor& w, const Tensor& b, DType compute, TokenRange rows) {
  DIT_CHECK(w.ndim() == 2 && rows.begin >= 0 && rows.begin < rows.end && rows.end <= w.dim(0),
            "weight shard: rows [" << rows.begin << ", " << rows.end << ") of " << shape_str(w.shape()));
  if (rows.begin == 0 && rows.end == w.dim(0)) return LinearWeight::prepare(w, b, compute);
  return LinearWeight::prepare(w.slice0(rows.begin, rows.end), b.defined() ? b.slice0(rows.begin, rows.end) : Tensor(),
                               compute);
}

static void check_cols(const Tensor& w, TokenRange cols) {
  DIT_CHECK(w.ndim() == 2 && cols.begin >= 0 && cols.begin < cols.end && cols.end <= w.dim(1),
            "weight shard: columns [" << cols.begin << ", " << cols.end << ") of " << shape_str(w.shape()));
}

LinearWeight shard_cols_view(const Tensor& w, const Tensor& b, DType compute, TokenRange cols) {
  check_cols(w, cols);
  DIT_CHECK(w.dtype() == compute, "weight shard: a view of columns needs the weight stored as "
                                      << dtype_name(compute) << ", not " << dtype_name(w.dtype()));
  LinearWeight lw = LinearWeight::prepare(w, b, compute);
  if (cols.size() < w.dim(1)) {
    lw.col_begin = cols.begin;
    lw.cols = cols.size();
  }
  return lw;
}

LinearWeight shard_cols(const Tensor& w, const Tensor& b, DType compute, TokenRange cols) {
  check_cols(w, cols);
  if (cols.begin == 0 && cols.end == w.dim(1)) return LinearWeight::prepare(w, b, compute);
  const int64_t out = w.dim(0), in = w.dim(1), width = cols.size();
  const size_t es = dtype_size(w.dtype());
  Tensor part = Tensor::empty({out, width}, w.dtype());
  const char* src = static_cast<const char*>(w.data());
  char* dst = static_cast<char*>(part.data());
  for (int64_t r = 0; r < out; ++r)
    std::memcpy(dst + size_t(r * width) * es, src + size_t(r * in + cols.begin) * es, size_t(width) * es);
  return LinearWeight::prepare(part, b, compute);
}

}  // namespace dit
