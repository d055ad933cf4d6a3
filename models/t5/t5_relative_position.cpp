#include "models/t5/t5_relative_position.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace dit {

int64_t t5_relative_position_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance) {
  const int64_t nb = num_buckets / 2;  // bidirectional
  const int64_t base = rel > 0 ? nb : 0;
  const int64_t n = std::llabs(rel);
  const int64_t max_exact = nb / 2;
  if (n < max_exact) return base + n;
  // torch: max_exact + (log(n.float() / max_exact) / math.log(max_distance / max_exact) * (nb - max_exact)).long(),
  // all in float32 (the Python double math.log(...) is rounded to float32 as a wrapped scalar).
  const float ratio = float(n) / float(max_exact);
  const float denom = float(std::log(double(max_distance) / double(max_exact)));
  const float scaled = std::log(ratio) / denom * float(nb - max_exact);
  const int64_t large = max_exact + int64_t(scaled);
  return base + std::min(large, nb - 1);
}

void t5_relative_bias_diagonals(const float* table, int64_t num_buckets, int64_t max_distance, int64_t heads,
                                int64_t seq_len, float* out) {
  const int64_t W = 2 * seq_len - 1;
  for (int64_t r = -(seq_len - 1); r <= seq_len - 1; ++r) {
    const int64_t b = t5_relative_position_bucket(r, num_buckets, max_distance);
    for (int64_t h = 0; h < heads; ++h) out[h * W + r + seq_len - 1] = table[b * heads + h];
  }
}

}  // namespace dit
