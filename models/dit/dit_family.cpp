#include "models/dit/dit_family.h"

#include "models/dit/class_labels.h"
#include "models/dit/dit_config.h"
#include "models/dit/dit_transformer.h"
#include "models/dit/dit_weights.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

namespace dit {

namespace {

// Prompts are class labels (id2label synonyms) or ids; the unconditional row is the null
// class (num_classes), as DiTPipeline's classifier-free guidance uses it.
class ClassConditioner final : public Conditioner {
 public:
  ClassConditioner(ModelIndex index, int num_classes) : index_(std::move(index)), num_classes_(num_classes) {}

  PromptInfo resolve(const std::string& prompt, bool negative, int) const override {
    DIT_CHECK(!negative || prompt.empty(),
              "--negative-prompt is not supported by class-conditional DiT models (the unconditional branch is the "
              "null class)");
    PromptInfo p;
    p.class_conditional = true;
    if (negative) return p;
    const ClassChoice c = resolve_class(index_, prompt, num_classes_);
    p.class_id = c.id;
    p.label = c.label;
    return p;
  }

  void encode(const std::vector<CondRow>& rows, int, Conditioning& cond) override {
    cond.batch = int64_t(rows.size());
    cond.class_ids.clear();
    for (const CondRow& r : rows)
      cond.class_ids.push_back(r.unconditional ? num_classes_ : resolve_class(index_, r.prompt, num_classes_).id);
  }

 private:
  ModelIndex index_;
  int num_classes_;
};

}  // namespace

LoadedFamily load_dit_family(const LoadOptions& opt, const ModelIndex& index, const Config& transformer_config) {
  const DiTConfig cfg = dit_config_from(transformer_config);
  WeightStore store = WeightStore::open_dir(opt.dir + "/transformer");
  use_weight_cache(store, opt.dtype, opt.weight_cache);
  LoadedFamily f;
  f.rules.family = "DiT";
  f.rules.prompt = PromptKind::ClassLabel;
  f.rules.num_classes = cfg.num_classes;
  f.rules.default_steps = 50;     // DiTPipeline.__call__ defaults
  f.rules.default_guidance = 4.0;
  f.rules.cond_first = true;      // CFG batch [cond, uncond]
  std::unique_ptr<TensorParallel> tp = opt.parallel->layers().tensor_parallel(TpScope::Transformer);
  DiTWeights w = DiTWeights::load(cfg, store, opt.dtype, opt.qkv, *tp);
  f.model = std::make_unique<DiTTransformer>(std::move(w), std::move(tp));
  f.conditioner = std::make_unique<ClassConditioner>(index, cfg.num_classes);
  return f;
}

}  // namespace dit
