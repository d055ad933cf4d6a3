// T5's relative position bias (transformers T5Attention, bidirectional encoder).
//
//   t5_relative_position_bucket(j - i, 32, 128)   // key position minus query position -> bucket
//
// Bucket of r = j - i with nb = num_buckets / 2 per direction and max_exact = nb / 2:
//   (r > 0 ? nb : 0) + (|r| < max_exact ? |r|
//                       : min(nb - 1, max_exact + trunc(ln(|r| / max_exact) / ln(max_distance / max_exact)
//                                                       · (nb - max_exact))))
// in float32 like torch (docs/t5.md; for 32/128: 0..7 exact, 8–11 → 8, ..., ≥ 91 → 15).
#pragma once

#include <cstdint>

namespace dit {

int64_t t5_relative_position_bucket(int64_t rel, int64_t num_buckets, int64_t max_distance);

// The bias as a function of r = j - i only (a Toeplitz matrix per head), for AttnBias::rel:
// out[h · (2L - 1) + (r + L - 1)] = table[bucket(r), h] for r in -(L-1)..L-1.
// table: [num_buckets, heads] f32 (relative_attention_bias.weight); out: [heads, 2L - 1].
void t5_relative_bias_diagonals(const float* table, int64_t num_buckets, int64_t max_distance, int64_t heads,
                                int64_t seq_len, float* out);

}  // namespace dit
