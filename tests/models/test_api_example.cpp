// The usage example at the top of the public header (models/dit_gen.h), compiled as the C++17
// project compiles and run on the tiny model: the example a user copies must build and work.
#include <catch2/catch.hpp>

#include <filesystem>

#include "golden_util.h"
#include "models/dit_gen.h"
#include "runtime/png.h"

namespace {

// The lines of the header's example, with the model directory and the output path as
// parameters (and fewer steps).
void header_example(const std::string& model_dir, const std::string& out) {
  dit::PipelineOptions opt;
  opt.model_dir = model_dir;                       // model_index.json, transformer/, vae/, scheduler/, ...
  auto pipe = dit::Pipeline::load(opt);            // validates and maps the weights once

  dit::Request req;
  req.prompt = "goldfish";                         // DiT: an ImageNet label or class id; text models: text
  req.seed = 42;                                   // same seed -> same image as diffusers
  req.steps = 2;
  dit::Result res = pipe->generate(req);           // res.image [1,3,H,W] in [0,1]
  dit::save_png(res, out);                         // with the parameters embedded (iTXt)
}

}  // namespace

TEST_CASE("the public header's usage example compiles and runs", "[models][api]") {
  const std::string out = std::filesystem::temp_directory_path() / "dit-api-example.png";
  header_example(dit_test::data_path("dit-tiny"), out);
  CHECK(dit::read_png_text(out, "parameters").rfind("goldfish\nSteps: 2,", 0) == 0);
  std::filesystem::remove(out);
}
