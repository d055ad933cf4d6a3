// bf16 compute from an f32 checkpoint with the converted-weight cache (runtime/weight_cache.h):
// the models read their linear weights as bf16 views of the one cache file every local rank
// maps (so Q/K/V stay split, not a private concatenation), with the same values as the
// in-memory conversion; what is not a linear weight stays f32. Loading needs no bf16 matmul,
// so this runs on every CPU (running the model in bf16 is tested where oneDNN can).
#include <catch2/catch.hpp>

#include <cstring>

#include "golden_util.h"
#include "models/dit/dit_config.h"
#include "models/dit/dit_weights.h"
#include "models/pixart/pixart_config.h"
#include "models/pixart/pixart_weights.h"
#include "runtime/json_config.h"
#include "runtime/safetensors.h"
#include "runtime/tensor_parallel.h"
#include "runtime/weight_cache.h"
#include "tests/runtime/io_test_util.h"

using dit::DType;
using dit::LinearWeight;
using dit::Tensor;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The rows [r0, r0 + rows) of a [R, C] bf16 weight.
Tensor rows_of(const Tensor& w, int64_t r0, int64_t rows) { return w.slice0(r0, r0 + rows); }

// A model's transformer weights loaded for bf16 compute twice: `a` converted in memory from
// the `plain` store, `b` read from the bf16 weight cache under `cache` through the `cached` one.
template <class Weights>
struct BothWays {
  dit::WeightStore plain, cached;
  Weights a, b;
};

template <class Weights, class ConfigFrom>
BothWays<Weights> load_both(const std::string& model, const std::string& cache, ConfigFrom config_from) {
  const std::string dir = dit_test::data_path(model) + "/transformer";
  const auto cfg = config_from(dit::Config::load(dir + "/config.json"));
  BothWays<Weights> w{dit::WeightStore::open_dir(dir), dit::WeightStore::open_dir(dir), {}, {}};
  dit::use_weight_cache(w.cached, DType::BF16, {cache, false});
  const auto tp = dit::make_serial_tensor_parallel();
  w.a = Weights::load(cfg, w.plain, DType::BF16, dit::QkvProjection::Auto, *tp);
  w.b = Weights::load(cfg, w.cached, DType::BF16, dit::QkvProjection::Auto, *tp);
  REQUIRE(w.a.blocks.size() == w.b.blocks.size());
  return w;
}

// Q/K/V from the cache against the fused private copy made without it: same values.
void check_qkv(const dit::QkvWeights& plain, const dit::QkvWeights& cached) {
  CHECK(plain.fused());  // converted in memory: a private copy either way, so fused
  CHECK(plain.qkv.row_blocks.empty());
  // Views of the shared cache, fused as row blocks of one packed entry (no private copy).
  REQUIRE(cached.fused());
  REQUIRE(cached.qkv.row_blocks.size() == 3);
  CHECK_FALSE(cached.qkv.weight.defined());
  CHECK(bool(cached.qkv.packed));
  CHECK(same_bytes(plain.qkv.bias, cached.qkv.bias));
  const int64_t D = cached.out();
  for (int i = 0; i < 3; ++i) {
    CHECK(cached.qkv.row_blocks[size_t(i)].dtype() == DType::BF16);
    CHECK(same_bytes(rows_of(plain.qkv.weight, i * D, D), cached.qkv.row_blocks[size_t(i)]));
  }
}

}  // namespace

TEST_CASE("bf16 weight cache: DiT reads its linears from the shared cache, same values", "[models][cache]") {
  dit_test::TempDir tmp;
  const auto w = load_both<dit::DiTWeights>("dit-tiny", tmp.path() + "/wc", dit::dit_config_from);
  const dit::DiTWeights &a = w.a, &b = w.b;
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    INFO("block " << i);
    check_qkv(a.blocks[i].qkv, b.blocks[i].qkv);
    for (auto m : {&dit::DiTBlockWeights::ada, &dit::DiTBlockWeights::attn_out, &dit::DiTBlockWeights::fc1,
                   &dit::DiTBlockWeights::fc2}) {
      CHECK(same_bytes((a.blocks[i].*m).w.weight, (b.blocks[i].*m).w.weight));
      CHECK(same_bytes((a.blocks[i].*m).w.bias, (b.blocks[i].*m).w.bias));
      CHECK((b.blocks[i].*m).w.bias.dtype() == DType::F32);
    }
    CHECK(same_bytes(a.blocks[i].t_fc1.weight, b.blocks[i].t_fc1.weight));
    CHECK(same_bytes(a.blocks[i].t_fc2.weight, b.blocks[i].t_fc2.weight));
    CHECK(b.blocks[i].class_table.dtype() == DType::F32);  // a table, not a linear: f32 as before
    CHECK(same_bytes(a.blocks[i].class_table, b.blocks[i].class_table));
  }
  for (auto m : {&dit::DiTWeights::patch, &dit::DiTWeights::final_ada, &dit::DiTWeights::final_out}) {
    CHECK((b.*m).weight.dtype() == DType::BF16);
    CHECK(same_bytes((a.*m).weight, (b.*m).weight));
  }
  // fc1 of block 0 ([4D, D] bf16, 8 KB: whole pages) lies in the cache's mapping, the
  // in-memory conversion in private memory.
  CHECK(w.cached.drop(b.blocks[0].fc1.w.weight) >= 4096);
  CHECK(w.plain.drop(a.blocks[0].fc1.w.weight) == 0);
}

TEST_CASE("bf16 weight cache: PixArt reads its linears from the shared cache, same values", "[models][cache]") {
  dit_test::TempDir tmp;
  const auto w = load_both<dit::PixArtWeights>("pixart-tiny", tmp.path() + "/wc", dit::pixart_config_from);
  const dit::PixArtWeights &a = w.a, &b = w.b;
  for (size_t i = 0; i < a.blocks.size(); ++i) {
    INFO("block " << i);
    check_qkv(a.blocks[i].qkv, b.blocks[i].qkv);
    for (auto m : {&dit::PixArtBlockWeights::q2, &dit::PixArtBlockWeights::k2, &dit::PixArtBlockWeights::v2,
                   &dit::PixArtBlockWeights::fc1}) {
      CHECK((b.blocks[i].*m).weight.dtype() == DType::BF16);
      CHECK(same_bytes((a.blocks[i].*m).weight, (b.blocks[i].*m).weight));
    }
    CHECK(same_bytes(a.blocks[i].fc2.w.weight, b.blocks[i].fc2.w.weight));
    CHECK(same_bytes(a.blocks[i].scale_shift_table, b.blocks[i].scale_shift_table));
  }
  for (auto m : {&dit::PixArtWeights::patch, &dit::PixArtWeights::ada, &dit::PixArtWeights::caption1,
                 &dit::PixArtWeights::caption2, &dit::PixArtWeights::proj_out}) {
    CHECK((b.*m).weight.dtype() == DType::BF16);
    CHECK(same_bytes((a.*m).weight, (b.*m).weight));
  }
}
