// Pipeline::load refuses what it cannot run with a dit::Error that names the bad value and
// what is supported: unknown pipeline / transformer / VAE classes and norm types, a missing
// model_index.json or config file, and configs whose keys are missing. Each case copies
// tests/data/dit-tiny to a temporary directory and edits one JSON file; the unedited copy
// must load (so a failure below is caused by the edit, not by the copy).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "golden_util.h"
#include "models/dit_gen.h"
#include "runtime/error.h"
#include "tests/runtime/io_test_util.h"

using namespace dit_test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A private copy of dit-tiny in a temporary directory.
struct ModelCopy {
  TempDir tmp;
  std::string dir = tmp.file("m");
  ModelCopy() { fs::copy(data_path("dit-tiny"), dir, fs::copy_options::recursive); }

  // Reads dir/rel, lets edit change it, writes it back.
  void edit(const std::string& rel, const std::function<void(json&)>& f) const {
    const std::string path = dir + "/" + rel;
    json j = json::parse(read_bytes(path));
    f(j);
    write_bytes(path, j.dump(2));
  }
  std::string load_error() const {
    return error_of([&] {
      dit::PipelineOptions po;
      po.model_dir = dir;
      dit::Pipeline::load(po);
    });
  }
};

}  // namespace

TEST_CASE("an unedited copy of dit-tiny loads", "[models][dispatch]") {
  ModelCopy m;
  CHECK(m.load_error() == "<no error>");
}

TEST_CASE("unknown pipeline class is rejected", "[models][dispatch]") {
  ModelCopy m;
  m.edit("model_index.json", [](json& j) { j["_class_name"] = "StableDiffusionPipeline"; });
  const std::string e = m.load_error();
  CHECK_THAT(e, Contains("model_index.json") && Contains("'StableDiffusionPipeline'") &&
                    Contains("not supported") && Contains("supported: DiTPipeline"));
}

TEST_CASE("model_index.json without _class_name is rejected", "[models][dispatch]") {
  ModelCopy m;
  m.edit("model_index.json", [](json& j) { j.erase("_class_name"); });
  CHECK_THAT(m.load_error(), Contains("model_index.json") && Contains("'_class_name'") && Contains("missing"));
}

TEST_CASE("model_index.json without a transformer component is rejected", "[models][dispatch]") {
  ModelCopy m;
  m.edit("model_index.json", [](json& j) { j.erase("transformer"); });
  CHECK_THAT(m.load_error(), Contains("model_index.json") && Contains("component 'transformer' missing"));
}

TEST_CASE("missing model_index.json is reported", "[models][dispatch]") {
  ModelCopy m;
  fs::remove(m.dir + "/model_index.json");
  CHECK_THAT(m.load_error(), Contains(m.dir + "/model_index.json") && Contains("not found"));
}

TEST_CASE("missing model directory is reported", "[models][dispatch]") {
  ModelCopy m;
  const std::string gone = m.dir + "-does-not-exist";
  const std::string e = error_of([&] {
    dit::PipelineOptions po;
    po.model_dir = gone;
    dit::Pipeline::load(po);
  });
  CHECK_THAT(e, Contains(gone) && Contains("does not exist"));
}

TEST_CASE("unknown transformer class is rejected", "[models][dispatch]") {
  ModelCopy m;
  m.edit("transformer/config.json", [](json& j) { j["_class_name"] = "UNet2DConditionModel"; });
  CHECK_THAT(m.load_error(), Contains("transformer/config.json") && Contains("'UNet2DConditionModel'") &&
                                 Contains("not supported") && Contains("Transformer2DModel") &&
                                 Contains("DiTTransformer2DModel"));
}

TEST_CASE("unknown transformer norm type is rejected", "[models][dispatch]") {
  ModelCopy m;
  // PixArt's norm: a Transformer2DModel that is not a class-conditional DiT.
  m.edit("transformer/config.json", [](json& j) { j["norm_type"] = "ada_norm_single"; });
  CHECK_THAT(m.load_error(), Contains("transformer/config.json") && Contains("norm_type 'ada_norm_single'") &&
                                 Contains("not supported") && Contains("supported: ada_norm_zero"));
}

TEST_CASE("Transformer2DModel without norm_type defaults to layer_norm and is rejected", "[models][dispatch]") {
  // diffusers' Transformer2DModel default norm_type is layer_norm (not a DiT); only
  // DiTTransformer2DModel implies ada_norm_zero.
  ModelCopy m;
  m.edit("transformer/config.json", [](json& j) { j.erase("norm_type"); });
  CHECK_THAT(m.load_error(), Contains("norm_type 'layer_norm'") && Contains("supported: ada_norm_zero"));

  ModelCopy d;
  d.edit("transformer/config.json", [](json& j) {
    j.erase("norm_type");
    j["_class_name"] = "DiTTransformer2DModel";
  });
  CHECK(d.load_error() == "<no error>");
}

TEST_CASE("missing transformer config is reported", "[models][dispatch]") {
  ModelCopy m;
  fs::remove(m.dir + "/transformer/config.json");
  CHECK_THAT(m.load_error(), Contains(m.dir + "/transformer/config.json") && Contains("cannot open"));
}

TEST_CASE("transformer config with a missing key", "[models][dispatch]") {
  // dit_config.cpp gives every size key diffusers' DiTTransformer2DModel default (16 heads
  // of 72, 28 layers, 1000 classes), so no key is strictly required: a config that leaves
  // out a key its checkpoint differs on is caught when the weights do not have the
  // default's shape, and the error names the file, the tensor and both shapes.
  SECTION("num_attention_heads") {
    ModelCopy m;
    m.edit("transformer/config.json", [](json& j) { j.erase("num_attention_heads"); });
    const std::string e = m.load_error();
    INFO(e);
    // default 16 heads × the config's head dim 8 = hidden 128; the checkpoint has 32
    CHECK_THAT(e, Contains("transformer/diffusion_pytorch_model.safetensors") &&
                      Contains("'pos_embed.proj.weight'") && Contains("expected [128, 4, 2, 2]") &&
                      Contains("found [32, 4, 2, 2]"));
  }
  SECTION("num_embeds_ada_norm") {
    ModelCopy m;
    m.edit("transformer/config.json", [](json& j) { j.erase("num_embeds_ada_norm"); });
    const std::string e = m.load_error();
    INFO(e);
    CHECK_THAT(e, Contains("class_embedder") && Contains("[11, 32]") && Contains("[1001, 32]"));
  }
  SECTION("a present key with the wrong type names the key") {
    ModelCopy m;
    m.edit("transformer/config.json", [](json& j) { j["num_layers"] = "two"; });
    CHECK_THAT(m.load_error(), Contains("transformer/config.json") && Contains("'num_layers'") &&
                                   Contains("expected integer") && Contains("two"));
  }
}

TEST_CASE("unknown VAE class is rejected", "[models][dispatch]") {
  ModelCopy m;
  m.edit("vae/config.json", [](json& j) { j["_class_name"] = "AutoencoderTiny"; });
  CHECK_THAT(m.load_error(), Contains("vae/config.json") && Contains("'AutoencoderTiny'") &&
                                 Contains("not supported") && Contains("supported: AutoencoderKL"));
}
