#include "models/t5/t5_config.h"

#include <cmath>

#include "runtime/error.h"
#include "runtime/json_config.h"
#include "runtime/printable.h"

namespace dit {
namespace {

int64_t int_in(const Config& c, const std::string& key, int64_t dflt, int64_t lo, int64_t hi) {
  const int64_t v = c.get_int(key, dflt);
  DIT_CHECK(v >= lo && v <= hi,
            c.source() << ": key '" << key << "': expected an integer in " << lo << ".." << hi << ", found " << v);
  return v;
}

}  // namespace

T5Config t5_config_from(const Config& c) {
  T5Config t;
  t.source = c.source();
  t.d_model = int_in(c, "d_model", t.d_model, 1, 65536);
  t.d_kv = int_in(c, "d_kv", t.d_kv, 1, 4096);
  t.num_heads = int_in(c, "num_heads", t.num_heads, 1, 1024);
  t.d_ff = int_in(c, "d_ff", t.d_ff, 1, 262144);
  t.num_layers = int_in(c, "num_layers", t.num_layers, 1, 1024);
  t.num_buckets = int_in(c, "relative_attention_num_buckets", t.num_buckets, 4, 1024);
  DIT_CHECK(t.num_buckets % 2 == 0, c.source() << ": key 'relative_attention_num_buckets': expected an even number "
                                                  "(bidirectional buckets), found "
                                               << t.num_buckets);
  // Bidirectional: half the buckets per direction, half of those exact; the logarithmic
  // ones need a maximum distance beyond the exact range.
  const int64_t max_exact = t.num_buckets / 4;
  t.max_distance = int_in(c, "relative_attention_max_distance", t.max_distance, max_exact + 1, 1 << 20);
  const double eps = c.get_double("layer_norm_epsilon", 1e-6);
  DIT_CHECK(std::isfinite(eps) && eps > 0 && eps < 1,
            c.source() << ": key 'layer_norm_epsilon': expected a number in (0, 1), found " << eps);
  t.eps = float(eps);
  t.vocab_size = int_in(c, "vocab_size", t.vocab_size, 1, 16 << 20);
  t.pad_token_id = int_in(c, "pad_token_id", t.pad_token_id, 0, t.vocab_size - 1);
  t.eos_token_id = int_in(c, "eos_token_id", t.eos_token_id, 0, t.vocab_size - 1);
  const std::string ff = c.get_string("feed_forward_proj", "relu");
  DIT_CHECK(ff == "gated-gelu", c.source() << ": key 'feed_forward_proj': expected \"gated-gelu\" (T5 v1.1), found \""
                                           << printable(ff) << "\"" << (c.has("feed_forward_proj") ? "" : " (the default)"));
  return t;
}

T5Config load_t5_config(const std::string& path) { return t5_config_from(Config::load(path)); }

}  // namespace dit
