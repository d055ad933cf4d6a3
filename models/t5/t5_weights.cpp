#include "models/t5/t5_weights.h"

#include <cstdlib>

#include "runtime/error.h"
#include "runtime/printable.h"

namespace dit {
namespace {

Tensor to_f32(const Tensor& t) { return t.dtype() == DType::F32 ? t : t.to(DType::F32); }

// Tensors named encoder.block.<n>.* for n >= layers, or a relative_attention_bias outside
// block 0, mean the config and the weights disagree: refuse them rather than ignore them.
void check_no_stray_blocks(const WeightStore& store, const T5Config& cfg) {
  const std::string prefix = "encoder.block.";
  for (const std::string& name : store.names()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    char* end = nullptr;
    const long n = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (end == name.c_str() + prefix.size()) continue;
    DIT_CHECK(n < cfg.num_layers, store.file_of(name).path()
                                      << ": tensor '" << printable(name) << "': block " << n << " but " << cfg.source
                                      << " says num_layers " << cfg.num_layers);
    DIT_CHECK(n == 0 || name.find("relative_attention_bias") == std::string::npos,
              store.file_of(name).path() << ": tensor '" << printable(name)
                                         << "': only block 0 has a relative_attention_bias in T5");
  }
}

}  // namespace

const TpPlan& t5_tp_plan() {
  static const TpPlan plan = {
      {"encoder.block.*.layer.0.SelfAttention.q", Split::Column, TpUnit::Heads},
      {"encoder.block.*.layer.0.SelfAttention.k", Split::Column, TpUnit::Heads},
      {"encoder.block.*.layer.0.SelfAttention.v", Split::Column, TpUnit::Heads},
      {"encoder.block.*.layer.0.SelfAttention.o", Split::Row, TpUnit::Heads},
      {"encoder.block.*.layer.1.DenseReluDense.wi_0", Split::Column},
      {"encoder.block.*.layer.1.DenseReluDense.wi_1", Split::Column},
      {"encoder.block.*.layer.1.DenseReluDense.wo", Split::Row},
  };
  return plan;
}

T5Weights T5Weights::load(const std::string& dir, DType compute, const TensorParallel* tp_in,
                          const WeightCacheOption& cache) {
  const std::unique_ptr<TensorParallel> serial = tp_in ? nullptr : make_serial_tensor_parallel();
  const TensorParallel& tp = tp_in ? *tp_in : *serial;
  T5Weights w;
  w.cfg = load_t5_config(dir + "/config.json");
  w.compute = compute;
  w.store = WeightStore::open_dir(dir, "model");
  use_weight_cache(w.store, compute, cache);
  const T5Config& c = w.cfg;
  const WeightStore& s = w.store;
  check_no_stray_blocks(s, c);
  const int64_t D = c.d_model, I = c.inner(), F = c.d_ff;

  // transformers ties encoder.embed_tokens to shared; a save keeps one or both.
  const char* emb_name = s.has("shared.weight") ? "shared.weight" : "encoder.embed_tokens.weight";
  if (!s.has(emb_name)) DIT_FAIL("missing tensor 'shared.weight' (or 'encoder.embed_tokens.weight') in " << s.describe());
  w.vocab = tp.shard(c.vocab_size, 1);
  w.heads = tp.shard(c.num_heads, 1);
  w.embedding = s.get(emb_name, {c.vocab_size, D}).slice0(w.vocab.begin, w.vocab.end);  // a view: our rows
  if (std::string(emb_name) == "shared.weight" && s.has("encoder.embed_tokens.weight"))
    s.get("encoder.embed_tokens.weight", {c.vocab_size, D});  // shape-checked; tied, not used
  const Tensor rel = to_f32(
      s.get("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", {c.num_buckets, c.num_heads}));
  w.rel_bias = Tensor::empty({c.num_buckets, w.heads.size()});
  for (int64_t b = 0; b < c.num_buckets; ++b)
    for (int64_t h = 0; h < w.heads.size(); ++h)
      w.rel_bias.f32()[b * w.heads.size() + h] = rel.f32()[b * c.num_heads + w.heads.begin + h];
  w.final_ln = to_f32(s.get("encoder.final_layer_norm.weight", {D}));

  auto linear = [&](const std::string& name, int64_t out, int64_t in) {
    const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
    LinearWeight lw = load_linear(s, prefix, out, in, compute, t5_tp_plan(), tp, c.d_kv, /*bias=*/false).w;
    lw.packed = {};  // one Linear serves every layer (set_weight): the weights are read in place
    return lw;
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "encoder.block." + std::to_string(i) + ".layer.";
    T5LayerWeights l;
    l.ln_attn = to_f32(s.get(p + "0.layer_norm.weight", {D}));
    l.q = linear(p + "0.SelfAttention.q.weight", I, D);
    l.k = linear(p + "0.SelfAttention.k.weight", I, D);
    l.v = linear(p + "0.SelfAttention.v.weight", I, D);
    l.o = linear(p + "0.SelfAttention.o.weight", D, I);
    l.ln_ff = to_f32(s.get(p + "1.layer_norm.weight", {D}));
    l.wi0 = linear(p + "1.DenseReluDense.wi_0.weight", F, D);
    l.wi1 = linear(p + "1.DenseReluDense.wi_1.weight", F, D);
    l.wo = linear(p + "1.DenseReluDense.wo.weight", D, F);
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace dit
