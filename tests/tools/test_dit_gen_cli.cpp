// dit-gen end to end, as a user runs it: outputs, reproducibility, and bad input.
#include <stb/stb_image.h>

#include <catch2/catch.hpp>
#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "cli_util.h"
#include "tests/compute_types.h"
#include "runtime/npy.h"
#include "runtime/png.h"
#include "runtime/safetensors.h"

using namespace dit_test;
namespace fs = std::filesystem;

namespace {

const std::string kTinyGen = " -m " + data_path("dit-tiny");

// The largest difference of two PNGs of one size, in levels of 255 (256 when they differ in size
// or either cannot be read).
int max_level_difference(const std::string& a, const std::string& b) {
  int wa = 0, ha = 0, wb = 0, hb = 0, c = 0;
  unsigned char* pa = stbi_load(a.c_str(), &wa, &ha, &c, 3);
  unsigned char* pb = stbi_load(b.c_str(), &wb, &hb, &c, 3);
  int most = pa && pb && wa == wb && ha == hb ? 0 : 256;
  for (int64_t i = 0; most < 256 && i < int64_t(wa) * ha * 3; ++i) most = std::max(most, std::abs(int(pa[i]) - int(pb[i])));
  stbi_image_free(pa);
  stbi_image_free(pb);
  return most;
}

// Expects a failed run: non-zero exit, a one-line "error" message mentioning `needle`, and no output file.
void expect_gen_failure(const std::string& args, const std::string& needle, const std::string& output) {
  RunResult r = run(gen(args));
  INFO("args: " << args << "\nstderr: " << r.err);
  CHECK(r.code != 0);
  CHECK(r.err.find("error") != std::string::npos);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(count_lines(r.err) == 1);  // one line: the message
  CHECK_FALSE(fs::exists(output));
}

}  // namespace

TEST_CASE("dit-gen writes a PNG of the right size with the parameters chunk", "[cli]") {
  Scratch s;
  const std::string png = s.file("a.png"), npy = s.file("a.npy");
  RunResult r = run(gen(kTinyGen + " -p \"tiger shark\" --steps 3 -s 5 -o " + png + " --save-latents " + npy));
  INFO(r.err);
  REQUIRE(r.code == 0);
  int w = 0, h = 0, c = 0;
  REQUIRE(stbi_info(png.c_str(), &w, &h, &c));
  CHECK(w == 16);
  CHECK(h == 16);
  CHECK(c == 3);
  const std::string params = dit::read_png_text(png, "parameters");
  CHECK(params.find("tiger shark") != std::string::npos);
  CHECK(params.find("Steps: 3") != std::string::npos);
  CHECK(params.find("Seed: 5") != std::string::npos);
  CHECK(params.find("Size: 16x16") != std::string::npos);
  CHECK(r.err.find("class 3") != std::string::npos);  // which class was used
  dit::Tensor lat = dit::read_npy(npy);
  CHECK(lat.shape() == dit::Shape{1, 4, 8, 8});
  CHECK(r.err.find("times:") == std::string::npos);  // the phase times only with -v
  r = run(gen(kTinyGen + " -p 3 --steps 2 -v -o " + png));
  INFO(r.err);
  REQUIRE(r.code == 0);
  for (const char* phase : {"times: connect ", ", load ", ", encode ", ", denoise ", "(step 1 ", ", decode ", ", write "})
    CHECK(r.err.find(phase) != std::string::npos);
}

// --vae-dtype: the decoder's type follows --dtype unless given; the PNG's parameters name it
// when it differs, and -v says both (and which Winograd form the 3x3 convolutions take). The
// latents do not depend on it, the pixels do.
TEST_CASE("dit-gen --vae-dtype: the decoder's convolution type, in the parameters when it differs", "[cli]") {
  if (!dit::compute_supported(dit::DType::BF16)) {
    WARN("--vae-dtype bf16 not checked: oneDNN has no bf16 on this CPU");
    return;
  }
  Scratch s;
  const std::string base = kTinyGen + " -p 3 --steps 2 -s 9 --dtype bf16";
  RunResult a = run(gen(base + " -v -o " + s.file("a.png") + " --save-latents " + s.file("a.npy")));
  RunResult b = run(gen(base + " --vae-dtype f32 -o " + s.file("b.png") + " --save-latents " + s.file("b.npy")));
  RunResult d = run(gen(base + " --vae-dtype bf16 -o " + s.file("d.png") + " --save-latents " + s.file("d.npy")));
  RunResult c = run(gen(kTinyGen + " -p 3 --steps 2 -s 9 --vae-dtype bf16 -o " + s.file("c.png")));
  INFO(a.err << b.err << c.err << d.err);
  REQUIRE(a.code == 0);
  REQUIRE(b.code == 0);
  REQUIRE(c.code == 0);
  REQUIRE(d.code == 0);
  CHECK(a.err.find("compute bf16, VAE bf16") != std::string::npos);
  if (!dit::amx_available()) CHECK(a.err.find("VAE bf16 (3x3 convolutions by Winograd F(2x2, 3x3))") != std::string::npos);
  const std::string pa = dit::read_png_text(s.file("a.png"), "parameters");
  const std::string pb = dit::read_png_text(s.file("b.png"), "parameters");
  const std::string pc = dit::read_png_text(s.file("c.png"), "parameters");
  const std::string pd = dit::read_png_text(s.file("d.png"), "parameters");
  CHECK(pa.find("Dtype: bf16, Version") != std::string::npos);
  CHECK(pb.find("Dtype: bf16, VAE dtype: f32, Version") != std::string::npos);
  CHECK(pc.find("Dtype: f32, VAE dtype: bf16, Version") != std::string::npos);
  CHECK(pd.find("Dtype: bf16, Version") != std::string::npos);
  CHECK(slurp(s.file("a.npy")) == slurp(s.file("b.npy")));
  CHECK(slurp(s.file("a.npy")) == slurp(s.file("d.npy")));
  CHECK(slurp(s.file("b.png")) != slurp(s.file("d.png")));
  CHECK(slurp(s.file("a.png")) == slurp(s.file("d.png")));
  // DIT_VAE_WINOGRAD: "all" takes the bf16 Winograd form with AMX too (to compare the two
  // there), "off" none, anything else is refused before a step runs.
  RunResult all = run("env DIT_VAE_WINOGRAD=all " + gen(base + " -v -o " + s.file("e.png")));
  RunResult off = run("env DIT_VAE_WINOGRAD=off " + gen(base + " -v -o " + s.file("f.png")));
  RunResult bad = run("env DIT_VAE_WINOGRAD=bogus " + gen(base + " -o " + s.file("g.png")));
  INFO(all.err << off.err << bad.err);
  REQUIRE(all.code == 0);
  REQUIRE(off.code == 0);
  CHECK(all.err.find("VAE bf16 (3x3 convolutions by Winograd F(2x2, 3x3))") != std::string::npos);
  if (!dit::amx_available()) CHECK(slurp(s.file("e.png")) == slurp(s.file("a.png")));
  CHECK(off.err.find("compute bf16, VAE bf16\n") != std::string::npos);  // no Winograd named
  CHECK(bad.code != 0);
  CHECK(bad.err.find("DIT_VAE_WINOGRAD: 'bogus' (expected on, off or all)") != std::string::npos);
  CHECK_FALSE(fs::exists(s.file("g.png")));
}

TEST_CASE("dit-gen: same seed, identical files - another seed, another image", "[cli]") {
  Scratch s;
  REQUIRE(run(gen(kTinyGen + " -p 7 --steps 2 -s 11 -o " + s.file("a.png"))).code == 0);
  REQUIRE(run(gen(kTinyGen + " -p 7 --steps 2 -s 11 -o " + s.file("b.png"))).code == 0);
  REQUIRE(run(gen(kTinyGen + " -p 7 --steps 2 -s 12 -o " + s.file("c.png"))).code == 0);
  CHECK(slurp(s.file("a.png")) == slurp(s.file("b.png")));
  CHECK(slurp(s.file("a.png")) != slurp(s.file("c.png")));
}

TEST_CASE("dit-gen: bad input gives a one-line error, a non-zero exit and no output", "[cli]") {
  Scratch s;
  const std::string png = s.file("out.png");
  const std::string o = " -o " + png;
  expect_gen_failure("-m " + s.file("nope") + " -p 1" + o, "does not exist", png);
  // A parallel run refuses a missing model before starting any rank: one line, as above.
  expect_gen_failure("-m " + s.file("nope") + " -p 1 --ulysses 2" + o, "does not exist", png);
  expect_gen_failure(kTinyGen + " -p zebra" + o, "closest labels", png);
  expect_gen_failure(kTinyGen + " -p 10" + o, "out of range", png);
  expect_gen_failure(kTinyGen + " -p 1 -W 17" + o, "multiples of", png);
  expect_gen_failure(kTinyGen + " -p 1 --sampler lms" + o, "lms", png);
  expect_gen_failure(kTinyGen + " -p 1 --dtype f16" + o, "dtype", png);
  expect_gen_failure(kTinyGen + " -p 1 --vae-dtype f16" + o, "--vae-dtype", png);
  expect_gen_failure(kTinyGen + " -p 1 --cfg-parallel --vae-parallel all" + o, "--vae-parallel: 'all' is not one of", png);
  // A bad request in a parallel run: every rank refuses it alike after loading; one line says
  // so (rank 0's), not one per rank and the launcher's account of it.
  struct Parallel {
    std::string args, needle;
  };
  for (const Parallel& p : {Parallel{kTinyGen + " -p zebra --cfg-parallel", "unknown class 'zebra'"},
                            Parallel{kTinyGen + " -p 1 -W 17 --cfg-parallel --ulysses 2", "multiples of"},
                            Parallel{kTinyGen + " -p 1 --sampler lms --ring 3", "unknown sampler 'lms'"},
                            // --vae-parallel ranks: a latent row per rank (4 rows, 6 ranks).
                            Parallel{"-m " + data_path("dit-small") +
                                         " -p 1 -W 32 -H 16 --cfg-parallel --ring 3 --vae-parallel ranks",
                                     "error: --vae-parallel: a 16-pixel-high image has 4 latent rows, fewer than the 6 "
                                     "bands"}}) {
    RunResult r = run(gen(p.args + o));
    INFO(p.args << "\n" << r.err);
    CHECK(r.code != 0);
    CHECK(r.err.find(p.needle) != std::string::npos);
    int error_lines = 0;
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);) {
      error_lines += line.find("error") != std::string::npos;
      CHECK(line.find("[rank ") == std::string::npos);
      CHECK(line.find("exited with code") == std::string::npos);
    }
    CHECK(error_lines == 1);
    CHECK_FALSE(fs::exists(png));
  }
  // bf16 where oneDNN cannot compute it (AVX2-only CPUs): refused before anything starts.
  if (!dit::compute_supported(dit::DType::BF16)) {
    expect_gen_failure(kTinyGen + " -p 1 --dtype bf16 --cfg-parallel" + o, "--dtype: bf16 compute is not available", png);
    expect_gen_failure(kTinyGen + " -p 1 --vae-dtype bf16" + o, "--vae-dtype: bf16 compute is not available", png);
  }
  expect_gen_failure(kTinyGen + " -p 1 -o " + s.file("no/such/dir/x.png"), "does not exist", s.file("no/such/dir/x.png"));

  // A checkpoint with a tensor missing, and a truncated one.
  const std::string broken = s.file("broken");
  fs::copy(data_path("dit-tiny"), broken, fs::copy_options::recursive);
  const std::string st = broken + "/transformer/diffusion_pytorch_model.safetensors";
  {
    auto f = dit::SafeTensorsFile::open(data_path("dit-tiny/transformer/diffusion_pytorch_model.safetensors"));
    dit::NamedTensors keep;
    for (const std::string& n : f->names())
      if (n != "transformer_blocks.1.attn1.to_k.weight") keep.emplace_back(n, f->get(n).clone());
    fs::remove(st);
    dit::write_safetensors(st, keep);
  }
  expect_gen_failure("-m " + broken + " -p 1" + o, "transformer_blocks.1.attn1.to_k.weight", png);
  fs::remove(st);
  fs::copy_file(data_path("dit-tiny/transformer/diffusion_pytorch_model.safetensors"), st);
  fs::resize_file(st, fs::file_size(st) / 2);
  expect_gen_failure("-m " + broken + " -p 1" + o, "diffusion_pytorch_model.safetensors", png);
  {
    // The same over four ranks: each finds it while loading; one line says so.
    RunResult r = run(gen("-m " + broken + " -p 1 --cfg-parallel --ulysses 2" + o));
    INFO(r.err);
    CHECK(r.code != 0);
    CHECK(r.err.find("diffusion_pytorch_model.safetensors") != std::string::npos);
    int error_lines = 0;
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);) error_lines += line.find("error") != std::string::npos;
    CHECK(error_lines == 1);
    CHECK_FALSE(fs::exists(png));
  }
}

namespace {

// Lines of `err` that report a failure (the layout and progress lines do not).
std::vector<std::string> failure_lines(const std::string& err) {
  std::vector<std::string> out;
  std::istringstream lines(err);
  for (std::string l; std::getline(lines, l);)
    if (l.find("error") != std::string::npos || l.find("fail") != std::string::npos ||
        l.find("signal") != std::string::npos)
      out.push_back(l);
  return out;
}

// A shell script: runs `dit-gen ARGS` (a long run) in the background with its stderr in
// `err_file`, SIGKILLs the `victim`-th worker process of that launcher once `watch_file` reports
// a step, waits, and prints "code <dit-gen's exit code>".
std::string kill_worker_script(const std::string& args, const std::string& err_file, int victim,
                               const std::string& watch_file) {
  return bin("dit-gen") + " " + args + " 2> " + err_file + " &\npid=$!\ni=0\n" +
         "while ! grep -q step_seconds " + watch_file + " 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n" +
         "kill -9 $(pgrep -P $pid | sed -n " + std::to_string(victim + 1) + "p)\nwait $pid\necho code $?\n";
}

}  // namespace

// A rank killed mid-run: the launcher names it in one line, and the ranks that stopped
// because of it say nothing (4 ranks used to print 5 lines: each survivor's error, then two
// from the launcher). On a second "machine" (another launcher sharing the rendezvous), whose
// ranks cannot see the victim's exit status, the one line is the abort its launcher posted.
TEST_CASE("dit-gen: a killed rank is reported in one line, the ranks it stopped stay quiet", "[cli]") {
  Scratch s;
  const std::string long_run = kTinyGen + " -p 3 --steps 1000 -t 1 --no-decode ";
  {
    write_text(s.file("one.sh"), kill_worker_script("--progress json" + long_run + "--cfg-parallel --ulysses 2",
                                               s.file("one.err"), 2, s.file("one.err")));
    RunResult r = run("sh " + s.file("one.sh"));
    const std::string err = slurp(s.file("one.err"));
    INFO(err);
    CHECK(r.out == "code 137\n");
    const auto lines = failure_lines(err);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] == "dit-gen: failed: rank 2 was killed by signal 9 (SIGKILL)");
  }
  {
    const std::string rdzv = " --rendezvous file:" + s.file("rdzv") + " --nnodes 2 --cfg-parallel --ulysses 2 ";
    fs::create_directories(s.file("rdzv"));
    // Node 0 (ranks 0, 1) reports the steps; node 1 (ranks 2, 3) loses its second worker.
    write_text(s.file("two.sh"), "(" + bin("dit-gen") + " --progress json" + long_run + rdzv + "--node-rank 0 2> " +
                                s.file("n0.err") + "; echo $? > " + s.file("n0.code") + ") &\n" +
                                kill_worker_script("--progress none" + long_run + rdzv + "--node-rank 1",
                                                   s.file("n1.err"), 1, s.file("n0.err")) +
                                "wait\n");
    RunResult r = run("sh " + s.file("two.sh"));
    const std::string err0 = slurp(s.file("n0.err")), err1 = slurp(s.file("n1.err"));
    INFO("node 0:\n" << err0 << "node 1:\n" << err1);
    CHECK(r.out == "code 137\n");
    const auto lines1 = failure_lines(err1);
    REQUIRE(lines1.size() == 1);
    CHECK(lines1[0] == "dit-gen: failed: rank 3 was killed by signal 9 (SIGKILL)");
    CHECK(slurp(s.file("n0.code")) == "1\n");
    const auto lines0 = failure_lines(err0);
    REQUIRE(lines0.size() == 1);
    CHECK(lines0[0].rfind("dit-gen: failed: rank 3 failed: killed by signal 9 on ", 0) == 0);
  }
}

// After the loop the other ranks wait while the output rank decodes; a large image's decode
// may take longer than --timeout (a collective's limit), and that is not a failure. Here the
// decode takes about 1.7 s and --timeout is 1 s.
TEST_CASE("dit-gen: ranks waiting for a decode longer than --timeout keep waiting", "[cli]") {
  // The decode must outlast --timeout for the case to happen: 640 x 640 decoded in 0.75-1.07 s
  // on the 2-core VM, so a larger image is tried when it did not. (Larger from the start made
  // the steps long enough to trip the 1 s heartbeat window under a loaded ctest -j2.)
  Scratch s;
  double decode = 0;
  for (const char* size : {"640", "768", "896"}) {
    const std::string png = s.file(std::string("big") + size + ".png");
    RunResult r = run(gen("-m " + data_path("dit-small") + " -p 1 --steps 1 -W " + size + " -H " + size +
                          " --cfg-parallel -t 1 --timeout 1 -v -o " + png));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(fs::exists(png));
    const size_t at = r.err.find(", decode ");
    REQUIRE(at != std::string::npos);
    decode = std::stod(r.err.substr(at + 9));
    WARN("decode " << decode << " s at " << size << " x " << size << " against --timeout 1");
    if (decode > 1.0) break;
  }
  CHECK(decode > 1.0);  // the case this test is about really happened
}

TEST_CASE("dit-gen --help shows every default - --version", "[cli]") {
  RunResult h = run(bin("dit-gen") + " --help");
  CHECK(h.code == 0);
  // Each flag's line names its default (CLI11 prints "=VALUE" after the type, or the text says it).
  // A flag's entry: its line, and the next one when the description wraps onto it.
  auto line_of = [&](const std::string& flag) {
    std::istringstream in(h.out);
    for (std::string l; std::getline(in, l);)
      if (l.find(flag + " ") != std::string::npos || l.find(flag + ",") != std::string::npos) {
        std::string next;
        if (std::getline(in, next) && next.find_first_not_of(' ') > 8 && next.find("--") == std::string::npos)
          l += " " + next;
        return l;
      }
    return std::string();
  };
  const std::pair<const char*, const char*> defaults[] = {
      {"--seed", "=42"},          {"--steps", "DiT 50, PixArt 20"},
      {"--cfg-scale", "DiT 4, PixArt 4.5"}, {"--output", "=output.png"},
      {"--dtype", "=f32"},        {"--progress", "=auto"},
      {"--model", "demo model"},  {"--sampler", "scheduler_config.json"},
      {"--width", "sample_size"}, {"--height", "sample_size"},
      {"--threads", "cores / local ranks"}, {"--micro-batch", "=1"},
      {"--dp", "=1"},             {"--ulysses", "=1"},
      {"--ring", "=1"},           {"--timeout", "=300"},
      {"--nproc-per-node", "world / nnodes"}};
  for (const auto& [flag, want] : defaults) {
    INFO(flag << ": " << line_of(flag));
    CHECK(line_of(flag).find(want) != std::string::npos);
  }
  CHECK(line_of("--threads").find("=0") == std::string::npos);  // 0 is "not given", not a default to show
  for (const char* f : {"--prompt", "--negative-prompt", "--guidance-scale", "--save-latents", "--no-decode", "--batch",
                        "--output-dir", "--cfg-parallel", "--rendezvous", "--nnodes", "--node-rank", "--verbose"})
    CHECK(h.out.find(f) != std::string::npos);
  RunResult v = run(bin("dit-gen") + " --version");
  CHECK(v.code == 0);
  CHECK(v.out.find("dit-gen") != std::string::npos);
}

TEST_CASE("dit-gen --progress json emits one parsable event per step", "[cli]") {
  Scratch s;
  RunResult r = run(bin("dit-gen") + " --progress json" + kTinyGen + " -p 1 --steps 4 --no-decode");
  REQUIRE(r.code == 0);
  int steps = 0;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("{\"event\":\"step\"", 0) == 0) ++steps;
  CHECK(steps == 4);
}

TEST_CASE("dit-gen without --model creates the demo model on first use - the presets' dimensions", "[cli]") {
  Scratch s;
  const std::string demo = s.file("demo");
  RunResult r = run("DIT_DEMO_MODEL=" + demo + " " + gen("-p \"golden retriever\" --steps 1 -W 64 -H 64 -o " + s.file("d.png")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.err.find("creating the demo model") != std::string::npos);
  CHECK(r.err.find("class 207 (golden retriever)") != std::string::npos);
  CHECK(fs::exists(s.file("d.png")));
  auto config = [](const std::string& dir) { return slurp(dir + "/transformer/config.json"); };
  // DiT-S/2-like: 12 layers, 6 heads x 64 = 384, 1000 classes, 256x256 (latent 32, VAE scale 8).
  for (const char* kv : {"\"num_layers\": 12", "\"num_attention_heads\": 6", "\"attention_head_dim\": 64",
                         "\"num_embeds_ada_norm\": 1000", "\"sample_size\": 32", "\"patch_size\": 2"}) {
    INFO(kv);
    CHECK(config(demo).find(kv) != std::string::npos);
  }
  // A second run reuses it (no "creating").
  RunResult again = run("DIT_DEMO_MODEL=" + demo + " " + gen("-p 1 --steps 1 -W 64 -H 64 --no-decode"));
  CHECK(again.code == 0);
  CHECK(again.err.find("creating the demo model") == std::string::npos);
  // xl: DiT-XL/2 dimensions (16 heads x 72 = 1152), shortened with --layers.
  const std::string xl = s.file("xl");
  RunResult mk = run(bin("dit-make-model") + " --preset xl --layers 1 --out " + xl);
  INFO(mk.err);
  REQUIRE(mk.code == 0);
  for (const char* kv : {"\"num_layers\": 1,", "\"num_attention_heads\": 16", "\"attention_head_dim\": 72",
                         "\"num_embeds_ada_norm\": 1000", "\"sample_size\": 32", "\"out_channels\": 8"}) {
    INFO(kv);
    CHECK(config(xl).find(kv) != std::string::npos);
  }
}

TEST_CASE("dit-make-model writes a model dit-gen loads (sharded, bf16)", "[cli]") {
  Scratch s;
  const std::string dir = s.file("m");
  RunResult mk = run(bin("dit-make-model") + " --preset tiny --out " + dir + " --shards 2 --dtype bf16 --seed 3");
  INFO(mk.err);
  REQUIRE(mk.code == 0);
  CHECK(fs::exists(dir + "/transformer/diffusion_pytorch_model.safetensors.index.json"));
  RunResult g = run(gen("-m " + dir + " -p \"goldfish\" --steps 2 -o " + s.file("x.png")));
  INFO(g.err);
  CHECK(g.code == 0);
  CHECK(fs::exists(s.file("x.png")));
  // Refuses to overwrite a non-empty directory.
  CHECK(run(bin("dit-make-model") + " --preset tiny --out " + dir).code != 0);
  CHECK(run(bin("dit-make-model") + " --preset huge --out " + s.file("h")).code != 0);
}

TEST_CASE("dit-gen refuses values it used to accept silently, before starting any rank", "[cli]") {
  Scratch s;
  const std::string png = s.file("out.png"), o = " -o " + png;
  // Seeds are 0..2^64-1 as written: -1 and 2^64 used to wrap to 2^64-1.
  expect_gen_failure(kTinyGen + " -p 1 -s -1" + o, "'-1' is not a seed", png);
  expect_gen_failure(kTinyGen + " -p 1 -s 18446744073709551616" + o, "is not a seed", png);
  // A guidance scale past a float's range is infinite in the f32 step: it used to run and be
  // reported as the checkpoint's non-finite latents.
  expect_gen_failure(kTinyGen + " -p 1 -g nan" + o, "guidance scale must be a finite number", png);
  expect_gen_failure(kTinyGen + " -p 1 -g 1e40" + o, "within a 32-bit float's range), got 1e+40", png);
  expect_gen_failure(kTinyGen + " -p 1 -g -1e39" + o, "within a 32-bit float's range", png);
  // Negative thread and rank counts used to mean "the default".
  expect_gen_failure(kTinyGen + " -p 1 -t -3" + o, "--threads must be in 1..4096", png);
  expect_gen_failure(kTinyGen + " -p 1 -t 100000" + o, "--threads must be in 1..4096", png);
  expect_gen_failure(kTinyGen + " -p 1 --cfg-parallel --nproc-per-node -1" + o, "--nproc-per-node must be in", png);
  expect_gen_failure(kTinyGen + " -p 1 --node-rank 3" + o, "--node-rank 3", png);
  // A malformed --rendezvous used to be ignored where one process needed none; --nnodes 2 with
  // one rank used to be reported as "--nproc-per-node 0", a flag not given.
  expect_gen_failure(kTinyGen + " -p 1 --rendezvous bogus" + o, "rendezvous 'bogus': expected file:DIR", png);
  expect_gen_failure(kTinyGen + " -p 1 --nnodes 2" + o, "make 1 rank, which do not split evenly over 2 machines",
                     png);
  // Layouts the model or the machine cannot run are refused before any rank starts (one line,
  // no "starting ranks"): more Ulysses ranks than heads; a thousand local processes.
  expect_gen_failure(kTinyGen + " -p 1 --ulysses 8" + o, "the model has 4 attention heads", png);
  expect_gen_failure(kTinyGen + " -p 1 --ring 1000" + o, "ranks on this machine are too many", png);
  expect_gen_failure(kTinyGen + " -p 1 --ulysses 5000" + o, "--ulysses and --ring must be in 1..1024", png);
  expect_gen_failure(kTinyGen + " --tp 2" + o, "--prompt is required", png);  // no prompt: refused by the launcher
  // A configuration with out-of-range integers is refused, not truncated (2^32 + 2 layers).
  const std::string m = s.file("m");
  fs::copy(data_path("dit-tiny"), m, fs::copy_options::recursive);
  {
    std::string cfg = slurp(m + "/transformer/config.json");
    const size_t at = cfg.find("\"num_layers\": 2");
    REQUIRE(at != std::string::npos);
    cfg.replace(at, 15, "\"num_layers\": 4294967298");
    std::ofstream(m + "/transformer/config.json") << cfg;
  }
  expect_gen_failure("-m " + m + " -p 1" + o, "'num_layers' = 4294967298 is out of range", png);
}

TEST_CASE("dit-gen: non-finite weights are reported, not written as a black image", "[cli]") {
  Scratch s;
  const std::string m = s.file("nan"), png = s.file("out.png");
  fs::copy(data_path("dit-tiny"), m, fs::copy_options::recursive);
  const std::string st = m + "/transformer/diffusion_pytorch_model.safetensors";
  {
    auto f = dit::SafeTensorsFile::open(data_path("dit-tiny/transformer/diffusion_pytorch_model.safetensors"));
    dit::NamedTensors all;
    for (const std::string& n : f->names()) {
      dit::Tensor t = f->get(n).clone();
      if (n == "proj_out_2.bias") t.f32()[0] = NAN;
      all.emplace_back(n, t);
    }
    fs::remove(st);
    dit::write_safetensors(st, all);
  }
  expect_gen_failure("-m " + m + " -p 1 --steps 2 -o " + png, "not finite", png);
  // The message names the guidance scale, the other thing that can make them so.
  expect_gen_failure("-m " + m + " -p 1 --steps 2 -g 3 -o " + png, "(guidance scale 3)", png);
}

// Local ranks run on disjoint cores by default (parallel/placement.h); -v prints them.
TEST_CASE("dit-gen pins local ranks to their own cores, -v says which, --no-pin opts out", "[cli]") {
  const std::string args = kTinyGen + " -p 1 --steps 1 --no-decode --cfg-parallel -t 1 -v";
  RunResult r = run(gen(args));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const unsigned cores = std::thread::hardware_concurrency();
  CHECK(r.err.find("rank 0 (local 0 of 2): 1 thread on core ") != std::string::npos);
  CHECK(r.err.find("rank 1 (local 1 of 2): 1 thread on core ") != std::string::npos);
  if (cores >= 2) CHECK(r.err.find("(pinned)") != std::string::npos);
  RunResult n = run(gen(args + " --no-pin"));
  INFO(n.err);
  REQUIRE(n.code == 0);
  CHECK(n.err.find("(not pinned: --no-pin)") != std::string::npos);
  CHECK(n.err.find("(pinned") == std::string::npos);
}

// OMP_PROC_BIND (or OMP_PLACES) makes libgomp bind the launcher's first thread to one core
// before main: the ranks used to start there, all on that core, one thread each.
TEST_CASE("dit-gen with OpenMP's binding set still places its ranks on their own cores", "[cli]") {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  const int cores = CPU_COUNT(&set);
  for (const char* var : {"OMP_PROC_BIND=true", "OMP_PLACES=cores"}) {
    RunResult r = run(std::string("env ") + var + " " + gen(kTinyGen + " -p 1 --steps 1 --no-decode --cfg-parallel -v"));
    INFO(var << "\n" << r.err);
    REQUIRE(r.code == 0);
    CHECK(r.err.find(std::string("dit-gen: note: ") + var +
                     " not passed to the ranks: each rank is placed on its own cores instead\n") != std::string::npos);
    const std::string each = std::to_string(std::max(1, cores / 2)) + " thread";
    CHECK(r.err.find("starting ranks 0..1 of 2 on this machine, " + each) != std::string::npos);
    CHECK(r.err.find("allowed core") == std::string::npos);  // no oversubscription warning
    if (cores >= 2) {
      CHECK(r.err.find("rank 0 (local 0 of 2): " + each) != std::string::npos);
      const size_t p0 = r.err.find("rank 0 (local 0 of 2): "), p1 = r.err.find("rank 1 (local 1 of 2): ");
      REQUIRE(p0 != std::string::npos);
      REQUIRE(p1 != std::string::npos);
      const auto cores_of = [&](size_t at) {
        const size_t a = r.err.find(" on core", at), b = r.err.find(" (pinned)", at);
        return a == std::string::npos || b == std::string::npos ? std::string() : r.err.substr(a, b - a);
      };
      CHECK_FALSE(cores_of(p0).empty());
      CHECK(cores_of(p0) != cores_of(p1));
    }
  }
}

// Two dit-gen ranks of one machine started by hand, as another launcher (mpirun, srun, a
// script) would: `vars` go before both; rank 1's stderr comes back in `rank1_err`.
namespace {
RunResult run_external_pair(const std::string& vars, const std::string& args, std::string& rank1_err) {
  Scratch s;
  std::filesystem::create_directory(s.file("rdzv"));
  const std::string env = vars + "DIT_WORLD_SIZE=2 DIT_LOCAL_WORLD_SIZE=2 DIT_RENDEZVOUS=file:" + s.file("rdzv") + " ";
  const std::string cmd = "( (DIT_RANK=1 DIT_LOCAL_RANK=1 " + env + bin("dit-gen") + args + " 2> " + s.file("r1.err") +
                          ") & DIT_RANK=0 DIT_LOCAL_RANK=0 " + env + bin("dit-gen") + args + "; rc=$?; wait; exit $rc )";
  RunResult r = run(cmd);
  rank1_err = slurp(s.file("r1.err"));
  return r;
}
}  // namespace

TEST_CASE("dit-gen ranks started by another launcher with OpenMP's binding: the first rank warns", "[cli]") {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  const int cores = CPU_COUNT(&set);
  std::string r1;
  RunResult r =
      run_external_pair("OMP_PROC_BIND=true ", kTinyGen + " -p 1 --steps 1 --no-decode --cfg-parallel --timeout 60", r1);
  INFO(r.err << "\nrank 1: " << r1);
  REQUIRE(r.code == 0);
  // Both ranks started on all the cores: each has cores / 2 threads, bound from the first core.
  const std::string line = "dit-gen: warning: OMP_PROC_BIND=true: OpenMP binds this rank's threads from the first of "
                           "the " + std::to_string(cores) + " cores it was started on";
  CHECK((r.err.find(line) != std::string::npos) == (cores >= 2));
  CHECK(r1.find("warning") == std::string::npos);  // once a machine
}

TEST_CASE("dit-gen warns once when this machine's ranks x threads exceed its allowed cores", "[cli]") {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  const int cores = CPU_COUNT(&set);
  const std::string args = kTinyGen + " -p 1 --steps 1 --no-decode --cfg-parallel";
  const std::string t = std::to_string(cores + 1);
  RunResult over = run(gen(args + " -t " + t));
  INFO(over.err);
  REQUIRE(over.code == 0);
  const std::string line = "dit-gen: warning: 2 ranks x " + t + " threads on this machine's " + std::to_string(cores) +
                           " allowed core" + (cores == 1 ? "" : "s") + ": ranks share cores and run slower (";
  const size_t at = over.err.find(line);
  REQUIRE(at != std::string::npos);
  CHECK(over.err.find(line, at + 1) == std::string::npos);  // once, from the launcher
  if (cores >= 2) CHECK(over.err.find("(leave out -t: ranks x threads <= cores)") != std::string::npos);
  // The default threads per rank fit, unless the machine has fewer cores than ranks.
  RunResult fit = run(gen(args));
  INFO(fit.err);
  REQUIRE(fit.code == 0);
  CHECK((fit.err.find("allowed core") != std::string::npos) == (cores < 2));
}

TEST_CASE("dit-gen ranks started by another launcher: the machine's first rank warns of shared cores", "[cli]") {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  const int cores = CPU_COUNT(&set);
  std::string r1;
  RunResult r = run_external_pair(
      "", kTinyGen + " -p 1 --steps 1 --no-decode --cfg-parallel --timeout 60 -t " + std::to_string(cores + 1), r1);
  INFO(r.err << "\nrank 1: " << r1);
  REQUIRE(r.code == 0);
  const std::string line = "dit-gen: warning: 2 ranks x " + std::to_string(cores + 1) + " threads on this machine's ";
  CHECK(r.err.find(line) != std::string::npos);
  CHECK(r1.find("warning") == std::string::npos);
}

TEST_CASE("dit-gen: linear and convolution weights packed into the weight cache once, mapped by later runs, the "
          "same latents and image",
          "[cli][cache]") {
  Scratch s;
  const std::string wc = s.file("wc"), packed = wc + "/packed";
  auto entries = [&] {
    std::map<std::string, fs::file_time_type> out;
    if (fs::exists(packed))
      for (const auto& e : fs::directory_iterator(packed))
        if (e.path().extension() == ".packed") out[e.path().filename().string()] = fs::last_write_time(e.path());
    return out;
  };
  auto latents = [&](const std::string& flags, const std::string& name) {
    RunResult r = run(gen(kTinyGen + " -p 3 --steps 2 " + flags + " -o " + s.file(name + ".png") + " --save-latents " +
                          s.file(name + ".npy")));
    INFO(flags << "\n" << r.err);
    REQUIRE(r.code == 0);
    return slurp(s.file(name + ".npy"));
  };
  const std::string a = latents("--weight-cache " + wc, "a");
  const auto made = entries();
  // Every block's linears (QKV, output, MLP, adaLN) have an entry where the kernels prefer a
  // blocked layout (AVX-512: always).
  if (dit_test::onednn_brgemm()) CHECK(made.size() >= 4);
  CHECK(latents("--weight-cache " + wc, "b") == a);
  CHECK(entries() == made);  // mapped, not rewritten
  CHECK(latents("--weight-cache off", "c") == a);
  // The VAE decoder's convolutions read their weights from entries too (one per weight and
  // layout): the same image bytes as a later run's. Without the cache they are direct, not by
  // Winograd (f32, AVX-512): the same pixels to a level (the two algorithms round apart).
  size_t conv_entries = 0;
  for (const auto& [name, when] : made) conv_entries += slurp(packed + "/" + name).find(".conv_in.weight|") != std::string::npos;
  CHECK(conv_entries == 1);
  CHECK(slurp(s.file("b.png")) == slurp(s.file("a.png")));
  CHECK(max_level_difference(s.file("c.png"), s.file("a.png")) <= 1);
  // Tensor parallelism packs each rank's shard under its own key: the same latents again.
  const std::string tp = latents("--tp 2 --weight-cache " + wc, "d");
  CHECK(tp == latents("--tp 2 --weight-cache off", "e"));
  if (dit_test::onednn_brgemm()) CHECK(entries().size() > made.size());
}
