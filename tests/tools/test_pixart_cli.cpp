// dit-gen with text-to-image PixArt models, as a user runs it: the image and its parameters
// against the reference, negative prompts, binning, batch files with text keys, resume, and
// bad input (one line, no output).
#include <stb/stb_image.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_util.h"
#include "tests/compute_types.h"
#include "runtime/npy.h"
#include "runtime/png.h"
#include "runtime/safetensors.h"

using namespace dit_test;
namespace fs = std::filesystem;

namespace {

const std::string kSigma = " -m " + data_path("pixart-tiny");
const std::string kAlpha = " -m " + data_path("pixart-alpha-tiny");

void expect_failure(const std::string& args, const std::string& needle, const std::string& output) {
  RunResult r = run(gen(args));
  INFO("args: " << args << "\nstderr: " << r.err);
  CHECK(r.code != 0);
  CHECK(r.err.find("error") != std::string::npos);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(count_lines(r.err) == 1);
  CHECK_FALSE(fs::exists(output));
}

std::vector<unsigned char> pixels(const std::string& png, int& w, int& h) {
  int c = 0;
  unsigned char* px = stbi_load(png.c_str(), &w, &h, &c, 3);
  REQUIRE(px);
  std::vector<unsigned char> v(px, px + size_t(w) * h * 3);
  stbi_image_free(px);
  return v;
}

}  // namespace

TEST_CASE("dit-gen PixArt-α: the reference's picture (binned 100x150 -> 208x304 and back)", "[cli][pixart]") {
  Scratch s;
  const std::string png = s.file("l.png"), lat = s.file("l.npy");
  RunResult r = run(gen(kAlpha + " -p 'a lighthouse on a rocky coast at sunset, oil painting' -s 5 --steps 6 -W 150 "
                                 "-H 100 -o " + png + " --save-latents " + lat));
  INFO(r.err);
  REQUIRE(r.code == 0);
  int w = 0, h = 0;
  const std::vector<unsigned char> mine = pixels(png, w, h);
  REQUIRE(w == 150);
  REQUIRE(h == 100);
  auto g = dit::SafeTensorsFile::open(data_path("golden/pixart-alpha-tiny/gen.lighthouse.100x150.bin.seed5.dpm6.g4.5.safetensors"));
  const std::vector<int64_t> ref = g->get_int64("image");
  REQUIRE(ref.size() == mine.size());
  int max_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) max_diff = std::max(max_diff, std::abs(int(mine[i]) - int(ref[i])));
  CHECK(max_diff <= 1);
  CHECK(dit::read_npy(lat).shape() == dit::Shape{1, 4, 26, 38});  // latents at the bin's size, 208x304
  const std::string params = dit::read_png_text(png, "parameters");
  CHECK(params.rfind("a lighthouse on a rocky coast at sunset, oil painting\nNegative prompt: \nSteps: 6, Sampler: "
                     "dpm++2m, CFG scale: 4.5, Seed: 5, Size: 150x100, Generation size: 304x208, Model: ",
                     0) == 0);
  CHECK(params.find("Max sequence length: 120,") != std::string::npos);
  CHECK(r.err.find("prompt 'a lighthouse") != std::string::npos);
}

TEST_CASE("dit-gen PixArt-Σ: defaults, negative prompt, no binning, truncation said once", "[cli][pixart]") {
  Scratch s;
  // The model's defaults: 20 steps, guidance 4.5, 256x256.
  RunResult a = run(gen(kSigma + " -p 'a red fox in the snow' -s 1 -o " + s.file("a.png")));
  INFO(a.err);
  REQUIRE(a.code == 0);
  const std::string pa = dit::read_png_text(s.file("a.png"), "parameters");
  CHECK(pa.find("Steps: 20, Sampler: dpm++2m, CFG scale: 4.5, Seed: 1, Size: 256x256, Model: ") != std::string::npos);
  // A negative prompt changes the picture and is recorded.
  RunResult b = run(gen(kSigma + " -p 'a red fox in the snow' -n 'blurry, low quality' -s 1 -o " + s.file("b.png")));
  REQUIRE(b.code == 0);
  CHECK(dit::read_png_text(s.file("b.png"), "parameters").find("\nNegative prompt: blurry, low quality\n") !=
        std::string::npos);
  CHECK(slurp(s.file("a.png")) != slurp(s.file("b.png")));
  // Without binning a non-bin size is generated as asked (multiples of 16 px).
  RunResult c = run(gen(kSigma + " -p 'a cabin' --steps 2 -W 80 -H 48 --no-resolution-binning -o " + s.file("c.png")));
  INFO(c.err);
  REQUIRE(c.code == 0);
  int w = 0, h = 0;
  pixels(s.file("c.png"), w, h);
  CHECK(w == 80);
  CHECK(h == 48);
  // A prompt longer than --max-sequence-length is cut, and the run says so once.
  RunResult d = run(gen(kSigma + " -p 'a very long prompt about a red fox walking through the deep snow' --steps 2 "
                                 "--max-sequence-length 4 -o " + s.file("d.png")));
  INFO(d.err);
  REQUIRE(d.code == 0);
  std::istringstream lines(d.err);
  int said = 0;
  for (std::string l; std::getline(lines, l);) said += l.find("it was cut") != std::string::npos;
  CHECK(said == 1);
}

TEST_CASE("dit-gen PixArt: bad input is one line and no file", "[cli][pixart]") {
  Scratch s;
  const std::string out = s.file("x.png");
  expect_failure(kSigma + " -p '' -o " + out, "--prompt is required", out);
  expect_failure(kSigma + " -p '   ' --steps 1 -o " + out, "the prompt is empty", out);
  expect_failure(kSigma + " -p \"$(printf '\\377\\376 fox')\" --steps 1 -o " + out, "prompt is not valid UTF-8", out);
  expect_failure(kSigma + " -p fox -n \"$(printf 'a\\300\\200')\" --steps 1 -o " + out,
                 "negative prompt is not valid UTF-8: overlong encoding at byte 1", out);
  expect_failure(kSigma + " -p fox --steps 1 -W 100 -H 60 --no-resolution-binning -o " + out, "multiples of 16", out);
  expect_failure(kSigma + " -p fox --steps 1 --max-sequence-length 100000 -o " + out, "max sequence length", out);
  expect_failure(" -m " + data_path("dit-tiny") + " -p 3 -n 'blurry' --steps 1 -o " + out, "--negative-prompt", out);
  expect_failure(" -m " + data_path("dit-tiny") + " -p 3 --max-sequence-length 20 --steps 1 -o " + out,
                 "--max-sequence-length is for text-to-image models", out);
  expect_failure(" -m " + data_path("dit-tiny") + " -p 3 --no-resolution-binning --steps 1 -o " + out,
                 "resolution binning", out);
  // A pipeline directory without its tokenizer or text encoder.
  for (const char* part : {"tokenizer", "text_encoder"}) {
    const std::string dir = s.file(std::string("no-") + part);
    fs::copy(data_path("pixart-tiny"), dir, fs::copy_options::recursive);
    fs::remove_all(dir + "/" + part);
    expect_failure(" -m " + dir + " -p fox --steps 1 -o " + out, part, out);
  }
  // A huge prompt (100 kB) is cut to the max length, not refused or slow.
  const std::string huge(100 * 1024, 'a');
  RunResult r = run(gen(kSigma + " -p '" + huge + " fox' --steps 1 --no-decode"));
  INFO(r.err.substr(0, 300));
  CHECK(r.code == 0);
  CHECK(r.err.find("it was cut") != std::string::npos);
}

TEST_CASE("dit-gen PixArt batch: text keys, shared prompt embeddings, resume, results.jsonl", "[cli][pixart][batch]") {
  Scratch s;
  const std::string file = s.file("p.jsonl"), out = s.file("out");
  {
    std::ofstream f(file);
    f << "{\"prompt\": \"a red fox in the snow\", \"seed\": 1, \"steps\": 2}\n"
         "{\"prompt\": \"a red fox in the snow\", \"negative_prompt\": \"blurry\", \"seed\": 1, \"steps\": 2}\n"
         "{\"prompt\": \"naïve café, über\", \"seed\": 2, \"steps\": 2, \"max_sequence_length\": 16}\n"
         "{\"prompt\": \"a cabin\", \"steps\": 2, \"width\": 80, \"height\": 48, \"resolution_binning\": false}\n"
         "{\"prompt\": \"\\u00ff\", \"steps\": 2, \"width\": 100, \"height\": 60, \"resolution_binning\": false}\n";
  }
  RunResult r = run(gen(kSigma + " --batch " + file + " --output-dir " + out + " --micro-batch 2"));
  INFO(r.err);
  CHECK(r.code == 1);  // item 4 fails (size off the grid); the others are generated
  CHECK(r.err.find("5 items: 4 generated, 0 skipped, 1 failed") != std::string::npos);
  std::vector<nlohmann::json> rec;
  {
    std::ifstream f(out + "/results.jsonl");
    for (std::string l; std::getline(f, l);) rec.push_back(nlohmann::json::parse(l));  // valid JSON, UTF-8 kept
  }
  REQUIRE(rec.size() == 5);
  for (const auto& j : rec) {
    CHECK(j.contains("negative_prompt"));
    CHECK_FALSE(j.contains("class_id"));
    if (j["index"] == 2) CHECK(j["prompt"] == "naïve café, über");
    if (j["index"] == 4) CHECK(j["status"] == "failed");
  }
  // The negative prompt makes item 1 differ from item 0 (same prompt and seed).
  CHECK(slurp(out + "/00000-a-red-fox-in-the-snow.png") != slurp(out + "/00001-a-red-fox-in-the-snow.png"));
  // Resume: everything done is skipped; a changed negative prompt is generated again.
  RunResult again = run(gen(kSigma + " --batch " + file + " --output-dir " + out));
  CHECK(again.err.find("5 items: 0 generated, 4 skipped, 1 failed") != std::string::npos);
  {
    std::ofstream f(file);
    f << "{\"prompt\": \"a red fox in the snow\", \"negative_prompt\": \"sharp\", \"seed\": 1, \"steps\": 2, "
         "\"output\": \"00001-a-red-fox-in-the-snow.png\"}\n";
  }
  RunResult changed = run(gen(kSigma + " --batch " + file + " --output-dir " + out));
  INFO(changed.err);
  CHECK(changed.err.find("1 items: 1 generated, 0 skipped, 0 failed") != std::string::npos);
}

TEST_CASE("dit-gen -m pixart-demo creates the text-to-image demo on first use (PixArt-Σ layout)", "[cli][pixart]") {
  Scratch s;
  const std::string demo = s.file("px");
  const std::string env = "DIT_PIXART_DEMO_MODEL=" + demo + " ";
  RunResult r = run(env + gen("-m pixart-demo -p 'a red fox in the snow' --steps 1 -o " + s.file("f.png")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.find("creating the demo model (PixArt-Σ") != std::string::npos);
  CHECK(fs::exists(s.file("f.png")));
  CHECK(slurp(demo + "/model_index.json").find("PixArtSigmaPipeline") != std::string::npos);
  for (const char* part : {"text_encoder/config.json", "tokenizer/spiece.model", "transformer/config.json",
                           "vae/config.json", "scheduler/scheduler_config.json"})
    CHECK(fs::exists(demo + "/" + part));
  CHECK(slurp(demo + "/scheduler/scheduler_config.json").find("-Infinity") != std::string::npos);
  RunResult again = run(env + gen("-m pixart-demo -p 'a cat' --steps 1 --no-decode"));
  CHECK(again.code == 0);
  CHECK(again.err.find("creating the demo model") == std::string::npos);
}

TEST_CASE("dit-gen: half-precision weights come from the converted-weight cache, reused, same picture",
          "[cli][pixart][cache]") {
  // pixart-alpha-tiny's T5 is three BF16 shards: under f32 compute each becomes one cache file.
  Scratch s;
  const std::string wc = s.file("wc");
  const std::string args = kAlpha + " -p 'a red fox' -s 3 --steps 2 -W 64 -H 64 --no-resolution-binning ";
  auto cache_files = [&] {
    std::map<std::string, fs::file_time_type> out;
    if (!fs::exists(wc)) return out;
    for (const auto& e : fs::directory_iterator(wc))
      if (e.path().string().find(".f32.safetensors") != std::string::npos &&
          e.path().extension() == ".safetensors")
        out[e.path().filename().string()] = fs::last_write_time(e.path());
    return out;
  };
  RunResult first = run(gen(args + "--weight-cache " + wc + " -o " + s.file("a.png")));
  INFO(first.err);
  REQUIRE(first.code == 0);
  const auto made = cache_files();
  CHECK(made.size() == 3);
  CHECK(first.err.find("weight cache: converting ") != std::string::npos);  // said once per file converted
  RunResult again = run(gen(args + "--weight-cache " + wc + " -o " + s.file("b.png")));
  REQUIRE(again.code == 0);
  CHECK(again.err.find("weight cache: converting ") == std::string::npos);  // mapped: nothing to say
  CHECK(cache_files() == made);  // mapped, not rewritten
  RunResult off = run(gen(args + "--weight-cache off -o " + s.file("c.png")));
  REQUIRE(off.code == 0);
  int w = 0, h = 0;
  const auto a = pixels(s.file("a.png"), w, h), b = pixels(s.file("b.png"), w, h), c = pixels(s.file("c.png"), w, h);
  CHECK(a == b);
  // Without the cache Q, K and V are three matmuls instead of one: the same bits where oneDNN's
  // kernels sum a row alike in both (brgemm, AVX-512; at these sizes), else a rounding apart.
  if (dit_test::onednn_brgemm()) {
    CHECK(a == c);
  } else {
    REQUIRE(a.size() == c.size());
    int most = 0;
    for (size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(int(a[i]) - int(c[i])));
    CHECK(most <= 2);
  }
  // A directory that cannot be created, named by the user, is an error (not a silent fallback).
  std::ofstream(s.file("plain")) << "x";
  expect_failure(args + "--weight-cache " + s.file("plain") + "/wc -o " + s.file("d.png"), "weight cache",
                 s.file("d.png"));
}
