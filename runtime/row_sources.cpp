#include "runtime/row_sources.h"

#include <algorithm>
#include <cstring>

#include "runtime/parallel_for.h"

namespace dit {

void GroupNormRows::rows(int64_t first, int64_t count, float* out) const {
  const int64_t w = s_.width, c = s_.channels, last = s_.height + 1;  // rows 0 and last are the halo rows
  parallel_for(count, count * w * c > 16384, [&](int64_t i) {
    const int64_t r = first + i;
    float* o = out + i * w * c;
    if ((r == 0 && top_) || (r == last && bottom_))
      std::memset(o, 0, size_t(w * c) * sizeof(float));
    else
      group_norm_apply(s_, f_, x_ + r * w * c, o, w);
  });
}

void UpsampledRows::rows(int64_t first, int64_t count, float* out) const {
  const int64_t ow = 2 * w_, last = 2 * rows_ + 1;  // the output's halo rows: 0 and last
  parallel_for(count, count * ow * c_ > 16384, [&](int64_t i) {
    const int64_t r = first + i;
    float* o = out + i * ow * c_;
    if ((r == 0 && top_) || (r == last && bottom_)) {
      std::memset(o, 0, size_t(ow * c_) * sizeof(float));
      return;
    }
    // Output row r is band row r - 1 (-1 and 2·rows: the halo rows), which repeats band row
    // floor((r - 1) / 2) of x: x's row (r + 1) / 2 counting its top halo row as 0.
    const float* xr = x_ + ((r + 1) / 2) * w_ * c_;
    for (int64_t j = 0; j < w_; ++j) {
      std::copy(xr + j * c_, xr + (j + 1) * c_, o + 2 * j * c_);
      std::copy(xr + j * c_, xr + (j + 1) * c_, o + (2 * j + 1) * c_);
    }
  });
}

}  // namespace dit
