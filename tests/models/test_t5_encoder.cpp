// The T5 encoder against the independent reference (pixart_reference.py t5_encode, checked
// bit-identical to transformers' T5EncoderModel): both tiny pipelines' text encoders and the
// single-file / F16 variants, f32 and bf16 compute.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "tests/compute_types.h"
#include "models/t5/prompt_encoder.h"
#include "models/t5/t5_encoder.h"
#include "models/t5/t5_relative_position.h"
#include "models/t5/t5_text.h"
#include "models/t5/t5_tokenizer.h"
#include "t5_test_util.h"

using namespace dit;
using t5_test::EncodeGolden;

TEST_CASE("T5 relative position buckets follow the table of docs/t5.md", "[t5]") {
  // b(n) for 32 buckets, max distance 128: n 0..7 -> n; 8-11 -> 8; 12-15 -> 9; 16-22 -> 10;
  // 23-31 -> 11; 32-45 -> 12; 46-63 -> 13; 64-90 -> 14; >= 91 -> 15. Keys after the query
  // (j - i > 0) add 16.
  auto b = [](int64_t n) {
    if (n < 8) return n;
    const int64_t edges[] = {12, 16, 23, 32, 46, 64, 91};
    int64_t v = 8;
    for (int64_t e : edges) v += n >= e;
    return v;
  };
  for (int64_t n = 0; n <= 4096; ++n) {
    INFO("distance " << n);
    REQUIRE(t5_relative_position_bucket(-n, 32, 128) == b(n));
    if (n > 0) REQUIRE(t5_relative_position_bucket(n, 32, 128) == 16 + b(n));
  }
}

TEST_CASE("T5 relative bias diagonals hold table[bucket(j - i)]", "[t5]") {
  const int64_t H = 3, L = 40, nb = 32;
  std::vector<float> table(nb * H);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(i) * 0.5f - 7.f;
  std::vector<float> diag(H * (2 * L - 1), -1.f);
  t5_relative_bias_diagonals(table.data(), nb, 128, H, L, diag.data());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < L; ++j)
        REQUIRE(diag[h * (2 * L - 1) + (j - i) + L - 1] == table[t5_relative_position_bucket(j - i, nb, 128) * H + h]);
}

TEST_CASE("T5 encoder matches the reference: pixart-tiny (F32 shards) and pixart-alpha-tiny (BF16 shards)", "[t5]") {
  struct Case {
    const char *golden, *encoder;
  };
  for (const Case& c : {Case{"golden/pixart-tiny/encode.L16.safetensors", "pixart-tiny/text_encoder"},
                        Case{"golden/pixart-alpha-tiny/encode.L16.safetensors", "pixart-alpha-tiny/text_encoder"}}) {
    const EncodeGolden g = t5_test::load_encode_golden(c.golden);
    REQUIRE(g.batch == 3);
    for (DType dt : dit_test::compute_types()) {
      const dit_test::Diff d = t5_test::encode_diff(c.encoder, g, dt);
      INFO(c.golden << " " << dtype_name(dt) << ": max abs " << d.max_abs << " of max |ref| " << d.ref_max
                    << ", rel " << d.rel());
      CHECK(d.ref_max > 0.1);
      CHECK(d.rel() <= (dt == DType::F32 ? 1e-5 : 1e-2));
    }
  }
}

TEST_CASE("PromptEncoder tokenizes the golden prompts like the reference and encodes them", "[t5]") {
  for (const char* m : {"pixart-tiny", "pixart-alpha-tiny"}) {
    const EncodeGolden g = t5_test::load_encode_golden(std::string("golden/") + m + "/encode.L16.safetensors");
    PromptEncoder pe = PromptEncoder::open(dit_test::data_path(m), DType::F32);
    CHECK(pe.default_max_length() == (std::string(m) == "pixart-tiny" ? 300 : 120));
    EncodedPrompts e = pe.encode(g.prompts, g.max_length);
    for (int64_t b = 0; b < g.batch; ++b) {
      INFO(m << " prompt " << b);
      const std::vector<int64_t> ids(g.ids.begin() + b * g.max_length, g.ids.begin() + (b + 1) * g.max_length);
      const std::vector<int64_t> mask(g.mask.begin() + b * g.max_length, g.mask.begin() + (b + 1) * g.max_length);
      CHECK(e.tokens[size_t(b)].ids == ids);
      CHECK(e.tokens[size_t(b)].mask == mask);
      CHECK(e.tokens[size_t(b)].truncated == (b == 0));  // the long prompt
    }
    const dit_test::Diff d = dit_test::diff(e.hidden, g.hidden);
    INFO(m << ": rel " << d.rel());
    CHECK(d.rel() <= 1e-5);
  }
}

TEST_CASE("PromptEncoder with Padding::Zeros: each prompt's positions as the reference's, its padding zero",
          "[t5]") {
  // The golden prompts pad to 16 (all but the truncated first one): Zeros encodes only up to
  // the longest prompt's end and leaves each prompt's padding at zero.
  const char* m = "pixart-tiny";
  const EncodeGolden g = t5_test::load_encode_golden(std::string("golden/") + m + "/encode.L16.safetensors");
  for (DType c : dit_test::compute_types()) {
    PromptEncoder pe = PromptEncoder::open(dit_test::data_path(m), c);
    const std::vector<std::string> shorter(g.prompts.begin() + 1, g.prompts.end());  // the padded ones
    const EncodedPrompts full = pe.encode(shorter, g.max_length);
    const EncodedPrompts zeros = pe.encode(shorter, g.max_length, false, PromptEncoder::Padding::Zeros);
    REQUIRE(zeros.hidden.shape() == full.hidden.shape());
    const int64_t L = g.max_length, D = full.hidden.dim(2);
    int64_t longest = 0;
    for (size_t b = 0; b < shorter.size(); ++b) {
      const int64_t n = zeros.tokens[b].length;
      longest = std::max(longest, n);
      INFO(dtype_name(c) << " prompt " << b << ", " << n << " of " << L << " positions");
      CHECK(zeros.tokens[b].mask == full.tokens[b].mask);
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < n * D; ++i) {
        const float a = zeros.hidden.f32()[int64_t(b) * L * D + i], f = full.hidden.f32()[int64_t(b) * L * D + i];
        worst = std::max(worst, double(std::fabs(a - f)));
        scale = std::max(scale, double(std::fabs(f)));
      }
      CHECK(worst <= (c == DType::BF16 ? 2e-2 : 1e-5) * scale);
      size_t nonzero = 0;
      for (int64_t i = n * D; i < L * D; ++i) nonzero += zeros.hidden.f32()[int64_t(b) * L * D + i] != 0.f;
      CHECK(nonzero == 0);
    }
    CHECK(longest < L);  // (the case tested: something was left out)
  }
}

TEST_CASE("T5 encoder variants match the reference: single file (no index), F16 shards + embed_tokens only",
          "[t5][variants]") {
  struct Case {
    const char *golden, *encoder;
  };
  const T5Tokenizer tok = T5Tokenizer::load(dit_test::data_path("pixart-tiny/tokenizer"));
  for (const Case& c : {Case{"golden/t5-variants/single-f32.encode.L300.safetensors", "t5-variants/single-f32/text_encoder"},
                        Case{"golden/t5-variants/f16-embed.encode.L16.safetensors", "t5-variants/f16-embed/text_encoder"}}) {
    const EncodeGolden g = t5_test::load_encode_golden(c.golden);
    for (int64_t b = 0; b < g.batch; ++b) {  // the reference's tokens
      const T5Tokens t = tok.encode(pixart_preprocess(g.prompts[size_t(b)]), g.max_length);
      CHECK(t.ids == std::vector<int64_t>(g.ids.begin() + b * g.max_length, g.ids.begin() + (b + 1) * g.max_length));
      CHECK(t.mask == std::vector<int64_t>(g.mask.begin() + b * g.max_length, g.mask.begin() + (b + 1) * g.max_length));
    }
    for (DType dt : dit_test::compute_types()) {
      const dit_test::Diff d = t5_test::encode_diff(c.encoder, g, dt);
      INFO(c.golden << " " << dtype_name(dt) << ": rel " << d.rel());
      CHECK(d.ref_max > 0.1);
      CHECK(d.rel() <= (dt == DType::F32 ? 1e-5 : 1e-2));
    }
  }
  // The 300-token golden has a prompt of more than 128 valid tokens: unmasked keys up to the
  // last (logarithmic, clipped) bucket.
  const EncodeGolden g = t5_test::load_encode_golden("golden/t5-variants/single-f32.encode.L300.safetensors");
  int64_t valid = 0;
  for (int64_t j = 0; j < g.max_length; ++j) valid += g.mask[size_t(j)];
  CHECK(valid > 128);
}

TEST_CASE("T5 weights: f32 storage is used in place, bf16 storage in place for bf16 compute", "[t5]") {
  const std::string sigma = dit_test::data_path("pixart-tiny/text_encoder");
  const std::string alpha = dit_test::data_path("pixart-alpha-tiny/text_encoder");
  const T5Weights f = T5Weights::load(sigma, DType::F32);
  const WeightStore& s = f.store;
  const std::string q = "encoder.block.1.layer.0.SelfAttention.q.weight";
  CHECK(f.layers[1].q.weight.data() == s.get(q).data());  // a view of the memory map
  CHECK(f.embedding.data() == s.get("shared.weight").data());
  const T5Weights a16 = T5Weights::load(alpha, DType::BF16);
  CHECK(a16.layers[2].wo.weight.dtype() == DType::BF16);
  CHECK(a16.layers[2].wo.weight.data() == a16.store.get("encoder.block.2.layer.1.DenseReluDense.wo.weight").data());
  CHECK(a16.embedding.dtype() == DType::BF16);
  const T5Weights a32 = T5Weights::load(alpha, DType::F32);  // bf16 storage, f32 compute: converted once
  CHECK(a32.layers[0].q.weight.dtype() == DType::F32);
  CHECK(a32.layers[0].q.weight.data() != a32.store.get("encoder.block.0.layer.0.SelfAttention.q.weight").data());
}
