// The VAE loader accepts both attention naming styles: diffusers' to_q/to_k/to_v/to_out.0
// and the pre-2023 query/key/value/proj_attn (as stored by sd-vae-ft-ema/mse), including
// the old 1×1-conv shape [C, C, 1, 1] of very old checkpoints.
#include <catch2/catch.hpp>
#include <filesystem>

#include "golden_util.h"
#include "models/dit_gen.h"
#include "runtime/safetensors.h"

using namespace dit_test;
namespace fs = std::filesystem;

namespace {

std::string old_name(std::string n) {
  const std::pair<const char*, const char*> ren[] = {
      {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}};
  if (n.find("mid_block.attentions") == std::string::npos) return n;
  for (auto [now, old] : ren) {
    const size_t p = n.find(now);
    if (p != std::string::npos) n.replace(p, std::string(now).size(), old);
  }
  return n;
}

}  // namespace

TEST_CASE("VAE with old attention names (query/key/value/proj_attn) decodes like the new names", "[models][vae]") {
  const bool conv_shape = GENERATE(false, true);
  char tmpl[] = "/tmp/dit-vae-names-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  fs::copy(data_path("dit-tiny"), dir + "/m", fs::copy_options::recursive);
  const std::string st = dir + "/m/vae/diffusion_pytorch_model.safetensors";
  {
    auto f = dit::SafeTensorsFile::open(data_path("dit-tiny/vae/diffusion_pytorch_model.safetensors"));
    dit::NamedTensors renamed;
    int changed = 0;
    for (const std::string& n : f->names()) {
      dit::Tensor t = f->get(n).clone();
      const std::string o = old_name(n);
      changed += o != n;
      if (conv_shape && o != n && t.ndim() == 2) t = t.reshape({t.dim(0), t.dim(1), 1, 1});
      renamed.emplace_back(o, t);
    }
    REQUIRE(changed == 8);
    fs::remove(st);
    dit::write_safetensors(st, renamed);
  }
  dit::PipelineOptions po;
  po.model_dir = dir + "/m";
  auto pipe = dit::Pipeline::load(po);
  dit::Request req;
  req.prompt = "3";
  req.seed = 42;
  req.steps = 10;
  req.sampler = "ddim";
  dit::Result res = pipe->generate(req);
  const std::string g = "dit-tiny.ddim10.label3.seed42.g4.safetensors";
  CHECK(diff(res.image, golden(g, "image")).max_abs < 2e-3);
  fs::remove_all(dir);
}
