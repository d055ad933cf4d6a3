// How the rows of one image are split over the processes that compute it together (the VAE
// decode under --vae-parallel): contiguous bands of rows, sizes differing by at most one
// (split_tokens), each band computed by one part. A layer that needs its neighbours' rows (a
// 3×3 convolution) keeps one halo row above and below its band; GroupNorm adds its sums over
// the bands; attention over all pixels gathers every band's K/V. The serial split has one
// part: the halo rows are the zero padding, the sums and gathers are local.
//
//   auto split = make_serial_row_split();            // or make_row_split(group), parallel/
//   TokenRange mine = split->range(64);               // [0, 64) serially
//   split->exchange_halo(band, mine.size(), row_bytes);  // band: [rows + 2][row_bytes]
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/token_split.h"

namespace dit {

class RowSplit {
 public:
  virtual ~RowSplit() = default;
  virtual int parts() const = 0;
  virtual int index() const = 0;
  // The band of a `rows`-row image this part computes (never empty: rows >= parts()).
  TokenRange range(int64_t rows) const { return split_tokens(rows, parts(), index()); }
  // band: [rows + 2][row_bytes], the part's rows at 1..rows. Row 0 gets the last row of the
  // part above and row rows+1 the first row of the part below; zeros at the image's edges.
  virtual void exchange_halo(void* band, int64_t rows, size_t row_bytes) = 0;
  // x[0..n) summed over the parts in part order, in place: every part gets the same bits.
  virtual void sum(double* x, int64_t n) = 0;
  // Every part's floats, concatenated in part order, into all (counts[p] from part p).
  virtual void gather(const float* mine, float* all, const std::vector<size_t>& counts) = 0;
};

std::unique_ptr<RowSplit> make_serial_row_split();

}  // namespace dit
