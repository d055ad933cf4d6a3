// Every parallel layout gives the serial run's result: CFG parallel, Ulysses, Ring and USP
// (Ulysses × Ring), alone and combined, as processes over loopback started by dit-gen's
// own launcher — exactly as a user runs them.
#include <stb/stb_image.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>

#include "cli_util.h"
#include "runtime/npy.h"
#include "tests/compute_types.h"

using namespace dit_test;

namespace {

struct Output {
  dit::Tensor eps0, latents;
  std::vector<unsigned char> pixels;
};

struct Diffs {
  double eps0_rel = 0, latents_rel = 0;
  int64_t px_diff = 0, px_total = 0, px_max_level = 0;
  bool eps0_bitwise = true, latents_bitwise = true;
};

double rel_diff(const dit::Tensor& a, const dit::Tensor& b, bool& bitwise) {
  double m = 0, ref = 0;
  bitwise = a.numel() == b.numel();
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    m = std::max(m, double(std::fabs(a.f32()[i] - b.f32()[i])));
    ref = std::max(ref, double(std::fabs(b.f32()[i])));
    bitwise = bitwise && a.f32()[i] == b.f32()[i];
  }
  return a.numel() == b.numel() ? m / ref : INFINITY;
}

// cfg × ulysses × ring from the layout flags.
int world_of(const std::string& flags) {
  std::istringstream in(flags);
  std::string w;
  int world = 1;
  while (in >> w) {
    if (w == "--cfg-parallel") world *= 2;
    if (w == "--ulysses" || w == "--ring" || w == "--tp" || w == "--dp") {
      int k = 1;
      in >> k;
      world *= k;
    }
  }
  return world;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A class id for DiT; text for PixArt (the prompt of each model kind).
std::string prompt_of(const std::string& model) { return model.rfind("pixart", 0) == 0 ? "'a red fox in the snow'" : "3"; }

// env: variables set for the run (e.g. "DIT_BF16_QK_PAD=on "), which its ranks inherit.
Output generate(const std::string& model, const std::string& layout_flags, const std::string& extra, const Scratch& s,
                const std::string& tag, const std::string& env = "") {
  const std::string png = s.file(tag + ".png"), lat = s.file(tag + ".lat.npy"), eps = s.file(tag + ".eps.npy");
  const std::string cmd = env + bin("dit-gen") + " --progress none -m " + data_path(model) + " -p " + prompt_of(model) +
                          " -s 7 --steps 10 -g 4 " +
                          "--sampler ddim -t 1 --timeout 60 " + extra + " " + layout_flags + " -o " + png +
                          " --save-latents " + lat + " --save-noise-pred " + eps;
  RunResult r = run(cmd);
  INFO(cmd << "\n" << r.err);
  REQUIRE(r.code == 0);
  // The layout really ran: the launcher started world-size ranks, and each printed its share.
  const int world = world_of(layout_flags);
  if (world > 1) {
    CHECK(r.err.find("dit-gen: " + std::to_string(world) + " ranks, mesh") != std::string::npos);
    CHECK(count(r.err, "dit-gen:   rank ") == world);
    CHECK((r.err.find("VAE decoded in " + std::to_string(world) + " bands of rows") != std::string::npos) ==
          (layout_flags.find("--vae-parallel ranks") != std::string::npos));
  } else {
    CHECK(r.err.find(" ranks, mesh") == std::string::npos);
  }
  Output o;
  o.eps0 = dit::read_npy(eps);
  o.latents = dit::read_npy(lat);
  int w, h, c;
  unsigned char* px = stbi_load(png.c_str(), &w, &h, &c, 3);
  REQUIRE(px);
  o.pixels.assign(px, px + size_t(w) * h * 3);
  stbi_image_free(px);
  return o;
}

Diffs compare(const Output& par, const Output& ser) {
  Diffs d;
  d.eps0_rel = rel_diff(par.eps0, ser.eps0, d.eps0_bitwise);
  d.latents_rel = rel_diff(par.latents, ser.latents, d.latents_bitwise);
  d.px_total = int64_t(ser.pixels.size());
  for (size_t i = 0; i < ser.pixels.size() && i < par.pixels.size(); ++i) {
    const int64_t diff = std::abs(int(par.pixels[i]) - int(ser.pixels[i]));
    d.px_diff += diff != 0;
    d.px_max_level = std::max(d.px_max_level, diff);
  }
  if (par.pixels.size() != ser.pixels.size()) d.px_diff = d.px_total;
  return d;
}

void check_layouts(const std::string& model, const std::string& extra, const std::vector<std::string>& layouts) {
  Scratch s;
  const Output serial = generate(model, "", extra, s, "serial");
  int n = 0;
  for (const std::string& layout : layouts) {
    const Output par = generate(model, layout, extra, s, "par" + std::to_string(n++));
    const Diffs d = compare(par, serial);
    INFO(model << " " << extra << " layout '" << layout << "': eps0 rel " << d.eps0_rel << ", latents rel "
               << d.latents_rel << ", pixels differing " << d.px_diff << "/" << d.px_total << " (max "
               << d.px_max_level << " levels)");
    WARN(model << " " << extra << " [" << layout << "] eps0 rel " << d.eps0_rel << (d.eps0_bitwise ? " (bit-identical)" : "")
               << ", latents rel " << d.latents_rel << (d.latents_bitwise ? " (bit-identical)" : "")
               << ", pixels differing " << d.px_diff << "/" << d.px_total);
    CHECK(d.eps0_rel <= 1e-5);
    CHECK(d.latents_rel <= 1e-4);
    CHECK(d.px_max_level <= 1);
    CHECK(double(d.px_diff) <= 0.001 * double(d.px_total));
  }
}

const std::vector<std::string> kLayouts = {"--cfg-parallel",
                                           "--ulysses 2",
                                           "--ring 2",
                                           "--ring 3",
                                           "--ring 4",
                                           "--ulysses 2 --ring 2",
                                           "--cfg-parallel --ulysses 2",
                                           "--cfg-parallel --ring 2",
                                           "--cfg-parallel --ulysses 2 --ring 2"};

}  // namespace

TEST_CASE("parallel layouts equal serial: tiny model (16 tokens, r3 splits unevenly)", "[parallel][equivalence]") {
  std::vector<std::string> layouts = kLayouts;
  layouts.push_back("--ulysses 4");
  check_layouts("dit-tiny", "", layouts);
}

TEST_CASE("parallel layouts equal serial: small model (64 tokens, 6 heads, r3 uneven)", "[parallel][equivalence]") {
  std::vector<std::string> layouts = kLayouts;
  layouts.push_back("--ulysses 4");  // 6 heads over 4 ranks: 2, 2, 1, 1
  check_layouts("dit-small", "", layouts);
}

TEST_CASE("parallel layouts equal serial: non-square size with uneven token split", "[parallel][equivalence]") {
  // 48x64 pixels on the small model: a 6x8 patch grid = 48 tokens; split over 5 ranks is uneven too.
  check_layouts("dit-small", "-W 64 -H 48", {"--ring 3", "--ulysses 2 --ring 2", "--cfg-parallel --ring 5"});
}

TEST_CASE("parallel layouts equal serial: PixArt-Σ (256 tokens, 4 heads, text cross-attention)",
          "[parallel][equivalence][pixart]") {
  std::vector<std::string> layouts = kLayouts;
  layouts.push_back("--ulysses 4");
  check_layouts("pixart-tiny", "", layouts);
}

TEST_CASE("parallel layouts equal serial: PixArt-Σ 3x5 tokens (no binning), uneven splits", "[parallel][equivalence][pixart]") {
  // 48x80 pixels without binning: a 3x5 patch grid = 15 tokens; r2 splits 8/7, u2r2 4/4/4/3, r4 4/4/4/3.
  check_layouts("pixart-tiny", "-W 80 -H 48 --no-resolution-binning",
                {"--ring 3", "--cfg-parallel --ring 2", "--ulysses 2 --ring 2", "--cfg-parallel --ulysses 2 --ring 2"});
}

TEST_CASE("parallel layouts equal serial: PixArt-α (micro-conditions, binned 100x150 -> 208x304)",
          "[parallel][equivalence][pixart]") {
  // 3 heads: Ulysses 2 splits them 2/1.
  check_layouts("pixart-alpha-tiny", "-W 150 -H 100", {"--cfg-parallel", "--ulysses 2", "--ring 3", "--cfg-parallel --ulysses 2 --ring 2"});
}

TEST_CASE("parallel layouts equal serial: Ulysses pipelined over head chunks", "[parallel][equivalence]") {
  // dit-small: 6 heads, 3 per rank over u2 -> chunks of 1; 2 chunks over 3 heads: 2 + 1.
  check_layouts("dit-small", "", {"--ulysses 2 --ulysses-chunks 3", "--cfg-parallel --ulysses 2 --ulysses-chunks 2"});
  check_layouts("pixart-tiny", "", {"--ulysses 2 --ulysses-chunks 2", "--ulysses 4 --ulysses-chunks 4"});
}

TEST_CASE("bf16: Ulysses, and on one machine the ring and USP, give the serial latents bit for bit",
          "[parallel][equivalence][bf16]") {
  if (!dit_test::bf16_available()) return;
  // In bf16 the Ulysses exchange moves q, k, v in the attention kernels' form and returns the
  // other ranks' outputs rounded to bf16, which the output projection rounds its input to
  // anyway: every layout below must give the serial bf16 run's noise prediction and final
  // latents exactly (head_dim 16 and 8: even, so the bf16 exchange is taken). On one machine a
  // layout with a ring runs as Ulysses over its whole sequence-parallel group
  // (parallel/parallel_attention.h) where the heads go round: the same bits.
  struct Case {
    std::string model;
    std::vector<std::string> layouts;
  };
  for (const Case& c : {Case{"dit-small", {"--ulysses 2", "--ulysses 3", "--ulysses 2 --ulysses-chunks 3",
                                           "--cfg-parallel --ulysses 2 --ulysses-chunks 2", "--ring 2",
                                           "--ulysses 2 --ring 2"}},
                        Case{"pixart-tiny", {"--ulysses 2", "--ulysses 4 --ulysses-chunks 4", "--cfg-parallel --ring 2"}}}) {
    Scratch s;
    const Output serial = generate(c.model, "", "--dtype bf16", s, "serial");
    int n = 0;
    for (const std::string& layout : c.layouts) {
      const Diffs d = compare(generate(c.model, layout, "--dtype bf16", s, "par" + std::to_string(n++)), serial);
      INFO(c.model << " [" << layout << "] bf16: eps0 rel " << d.eps0_rel << ", latents rel " << d.latents_rel);
      CHECK(d.eps0_bitwise);
      CHECK(d.latents_bitwise);
      CHECK(d.px_diff == 0);
    }
  }
}

TEST_CASE("bf16 with Q·Kᵀ over a padded head_dim: the parallel layouts still give the serial latents bit for bit",
          "[parallel][equivalence][bf16]") {
  if (!dit_test::bf16_available()) return;
  // DIT_BF16_QK_PAD=on makes every rank pad as an AMX machine does by default: the single
  // process pads its q and k planes, Ulysses' and the ring's attention pad each block of the
  // planes they are handed (runtime/attention.h). The same matmuls over the same values: the
  // same bits. dit-small's head_dim 16 and pixart-tiny's 8 are padded to 32.
  const std::string env = "DIT_BF16_QK_PAD=on ";
  struct Case {
    std::string model;
    std::vector<std::string> layouts;
  };
  for (const Case& c : {Case{"dit-small", {"--ulysses 2", "--ulysses 2 --ulysses-chunks 3", "--ring 2"}},
                        Case{"pixart-tiny", {"--cfg-parallel --ulysses 2"}}}) {
    Scratch s;
    const Output serial = generate(c.model, "", "--dtype bf16", s, "serial", env);
    const Output plain = generate(c.model, "", "--dtype bf16", s, "plain", "DIT_BF16_QK_PAD=off ");
    int n = 0;
    for (const std::string& layout : c.layouts) {
      const Diffs d = compare(generate(c.model, layout, "--dtype bf16", s, "par" + std::to_string(n++), env), serial);
      INFO(c.model << " [" << layout << "] bf16, padded: eps0 rel " << d.eps0_rel << ", latents rel " << d.latents_rel);
      CHECK(d.eps0_bitwise);
      CHECK(d.latents_bitwise);
      CHECK(d.px_diff == 0);
    }
    // Padded or not, the same model within bf16's rounding (the pad adds exact zeros).
    const Diffs p = compare(serial, plain);
    INFO(c.model << " padded against unpadded: eps0 rel " << p.eps0_rel << ", latents rel " << p.latents_rel);
    CHECK(p.eps0_rel <= 1e-2);
    CHECK(p.latents_rel <= 1e-2);
  }
  // -v says so, and a value the variable does not take is one clear error.
  Scratch s;
  const std::string model = data_path("dit-small");
  RunResult r = run(env + bin("dit-gen") + " -v --progress none -m " + model + " -p 3 --steps 1 --dtype bf16 -o " +
                    s.file("v.png"));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("compute bf16 (attention's Q·Kᵀ over head_dim zero-padded to a multiple of 32)") != std::string::npos);
  r = run("DIT_BF16_QK_PAD=yes " + bin("dit-gen") + " --progress none -m " + model + " -p 3 --steps 1 --dtype bf16 -o " +
          s.file("bad.png"));
  CHECK(r.code != 0);
  CHECK(r.err.find("DIT_BF16_QK_PAD: 'yes' (expected on, off or auto)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(s.file("bad.png")));
}

TEST_CASE("rows shared (--share-rows on) or each rank's own (off): the same latents bit for bit",
          "[parallel][equivalence][ffn]") {
  // Every layout above ran with the default (auto: shared on one machine). Here the same layouts
  // with the rows shared (on) and each rank's own (off) give identical bits: a task's rows are
  // the same matmuls over the same values whoever computes them (parallel/shared_rows.h), and
  // oneDNN's brgemm (AVX-512) gives a row the same bits in a task as among all rows (on AVX2,
  // gemm:jit: a rounding apart, which is what is checked there).
  struct Case {
    std::string model, extra;
    std::vector<std::string> layouts;
  };
  std::vector<Case> cases = {Case{"dit-small", "", {"--ulysses 2", "--cfg-parallel --ring 2", "--ulysses 3"}},
                             Case{"pixart-tiny", "", {"--cfg-parallel --ulysses 2"}}};
  if (dit_test::bf16_available()) cases.push_back(Case{"dit-small", "--dtype bf16", {"--cfg-parallel --ulysses 2"}});
  for (const Case& c : cases) {
    Scratch s;
    int n = 0;
    for (const std::string& layout : c.layouts) {
      const Output on = generate(c.model, layout + " --share-rows on", c.extra, s, "on" + std::to_string(n));
      const Output off = generate(c.model, layout + " --share-rows off", c.extra, s, "off" + std::to_string(n++));
      const Diffs d = compare(on, off);
      INFO(c.model << " " << c.extra << " [" << layout << "] shared against not: eps0 rel " << d.eps0_rel
                   << ", latents rel " << d.latents_rel);
      if (dit_test::matmul_rows_independent()) {
        CHECK(d.eps0_bitwise);
        CHECK(d.latents_bitwise);
        CHECK(d.px_diff == 0);
      } else {  // (gemm:jit: a task's rows a rounding apart from the same rows at once)
        CHECK(d.eps0_rel <= 1e-5);
        CHECK(d.latents_rel <= 1e-5);
      }
    }
  }
  // -v names it on each rank; "on" where it cannot be says why; a bad value is one clear error.
  Scratch s;
  const std::string model = data_path("dit-small");
  const std::string base = bin("dit-gen") + " --progress none --timeout 60 -m " + model + " -p 3 --steps 1 ";
  RunResult r = run(base + "-t 1 -v --cfg-parallel --ulysses 2 -o " + s.file("v.png"));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(count(r.err, "Q, K, V and feed-forward rows shared with the replica's 4 ranks") == 4);
  CHECK(count(r.err, "dit-gen: shared memory: ") == 1);  // rank 0's pages (parallel/shm_mapping.h)
  r = run("DIT_NO_SHM_HUGE_PAGES=1 " + base + "-t 1 -v --cfg-parallel --ulysses 2 -o " + s.file("small.png"));
  CHECK(r.code == 0);
  CHECK(count(r.err, "dit-gen: shared memory: 0 MB on 2 MB pages, ") == 1);
  CHECK(count(r.err, "MB on 4 KB pages (turned off by DIT_NO_SHM_HUGE_PAGES)") == 1);
  r = run(base + "-t 1 -v --cfg-parallel --share-ffn off -o " + s.file("off.png"));  // the older name
  CHECK(r.code == 0);
  CHECK(r.err.find("rows shared with") == std::string::npos);
  // Windows turned off: -v does not claim what cannot happen.
  r = run("DIT_NO_SHM_WINDOWS=1 " + base + "-t 1 -v --cfg-parallel --ulysses 2 -o " + s.file("nowin.png"));
  CHECK(r.code == 0);
  CHECK(r.err.find("rows shared with") == std::string::npos);
  // auto: not with more than 4 threads a rank; on: with any.
  r = run(base + "-v --cfg-parallel -t 5 -o " + s.file("t5.png"));
  CHECK(r.code == 0);
  CHECK(r.err.find("rows shared with") == std::string::npos);
  r = run(base + "-v --cfg-parallel -t 5 --share-rows on -o " + s.file("t5on.png"));
  CHECK(r.code == 0);
  CHECK(count(r.err, ", feed-forward rows shared with the replica's 2 ranks") == 2);  // (Q, K, V: under sequence parallelism)
  r = run(base + "-t 1 --ulysses 2 --tp 2 --share-rows on -o " + s.file("tp.png"));
  CHECK(r.code == 0);
  for (const char* what : {"the Q, K, V projection", "the feed-forward"})
    CHECK(count(r.err, std::string("warning: --share-rows on: ") + what +
                           " runs on each rank's own rows (its weights are split by tensor parallelism)") == 1);
  r = run(base + "-t 1 --ulysses 2 --transport tcp --share-rows on -o " + s.file("tcp.png"));
  CHECK(r.code == 0);
  for (const char* what : {"the Q, K, V projection", "the feed-forward"})
    CHECK(count(r.err, std::string("warning: --share-rows on: ") + what +
                           " runs on each rank's own rows (its ranks do not share one machine's memory)") == 1);
  r = run(base + "-t 1 --cfg-parallel --share-rows yes -o " + s.file("bad.png"));
  CHECK(r.code != 0);
  CHECK(r.err.find("--share-rows") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(s.file("bad.png")));
}

TEST_CASE("parallel VAE (--vae-parallel ranks): the decode split over a replica's ranks gives the serial image", "[parallel][equivalence][vae]") {
  // Latent rows over the replica: dit-small's 16 over 2 and 4 ranks, 12 (48x64) over 3 and 5;
  // dit-tiny's 8 over 8 ranks (bands of one row); PixArt-α's binned 208x304 (26 rows) over 4.
  check_layouts("dit-small", "", {"--cfg-parallel --vae-parallel ranks", "--cfg-parallel --ulysses 2 --vae-parallel ranks"});
  check_layouts("dit-small", "-W 64 -H 48", {"--ring 3 --vae-parallel ranks", "--ring 5 --vae-parallel ranks"});
  check_layouts("dit-tiny", "", {"--cfg-parallel --ring 4 --vae-parallel ranks"});
  check_layouts("pixart-alpha-tiny", "-W 150 -H 100", {"--cfg-parallel --tp 2 --vae-parallel ranks"});
}

TEST_CASE("tensor parallel layouts equal serial: DiT (6 heads: tp4 splits them 2, 2, 1, 1)", "[parallel][equivalence][tp]") {
  check_layouts("dit-small", "", {"--tp 2", "--tp 3", "--tp 4", "--cfg-parallel --tp 2", "--ulysses 2 --tp 2",
                                  "--ring 2 --tp 2", "--tp 2 --sp-min-tokens 1",
                                  "--cfg-parallel --ulysses 2 --tp 2 --sp-min-tokens 1",
                                  // the strided reduce-scatter and all-gather over TCP (as between machines)
                                  "--tp 3 --sp-min-tokens 1 --transport tcp"});
}

TEST_CASE("tensor parallel layouts equal serial: PixArt-Σ (transformer and T5 split)", "[parallel][equivalence][tp][pixart]") {
  check_layouts("pixart-tiny", "", {"--tp 2", "--tp 4 --sp-min-tokens 1", "--cfg-parallel --tp 2",
                                    "--ring 2 --tp 2 --sp-min-tokens 1"});
}

TEST_CASE("tensor parallel: Megatron sequence parallelism on and off agree", "[parallel][equivalence][tp]") {
  Scratch s;
  for (const char* model : {"dit-small", "pixart-tiny"}) {
    const Output off = generate(model, "--tp 2 --sp-min-tokens 1000000", "", s, std::string(model) + "-off");
    const Output on = generate(model, "--tp 2 --sp-min-tokens 1", "", s, std::string(model) + "-on");
    const Diffs d = compare(on, off);
    INFO(model << ": eps0 rel " << d.eps0_rel << ", latents rel " << d.latents_rel);
    CHECK(d.eps0_rel <= 1e-5);
    CHECK(d.latents_rel <= 1e-4);
  }
}

TEST_CASE("bf16: tensor parallelism gives the serial bf16 latents up to the row sums' order", "[parallel][equivalence][tp][bf16]") {
  if (!dit_test::bf16_available()) return;
  // The row-parallel fc2 reads the bf16 hidden activations fc1 wrote (models/common/
  // feed_forward.h) and sums the ranks' f32 partial products in another order than one matmul
  // does. The first noise prediction is then within bf16's own distance from f32 (about 3e-3;
  // measured 6e-4 for dit-small, 0 for pixart-tiny), far from what a rank reading the wrong
  // activations or missing another rank's partial products gives. Later steps see bf16 turn
  // last-bit differences into bf16-sized ones, which these random models amplify over the 10
  // steps (pixart-tiny: 0 after 2 steps, 7e-8 after 3, 3e-3 after 5, about 0.1 after 10, where
  // f32 tensor parallelism stays at 4e-6): the latents get a bound of that kind only.
  for (const char* model : {"dit-small", "pixart-tiny"}) {
    Scratch s;
    const Output serial = generate(model, "", "--dtype bf16", s, "serial");
    int n = 0;
    for (const char* layout : {"--tp 2", "--tp 2 --sp-min-tokens 1", "--cfg-parallel --tp 2"}) {
      const Diffs d = compare(generate(model, layout, "--dtype bf16", s, "par" + std::to_string(n++)), serial);
      INFO(model << " [" << layout << "] bf16: eps0 rel " << d.eps0_rel << ", latents rel " << d.latents_rel);
      CHECK(d.eps0_rel <= 2e-3);
      CHECK(d.latents_rel <= 0.25);
    }
  }
}

TEST_CASE("tensor parallel: degrees the heads cannot take are refused before any rank starts", "[parallel][cli][tp]") {
  Scratch s;
  RunResult r = run(bin("dit-gen") + " --progress none -m " + data_path("dit-tiny") + " -p 1 --steps 1 --tp 8 -t 1 -o " +
                    s.file("x.png"));
  INFO(r.err);
  CHECK(r.code != 0);
  CHECK(r.err.find("--tensor-parallel 8: the model has 4 attention heads") != std::string::npos);
  CHECK(r.err.find("starting ranks") == std::string::npos);
  RunResult u = run(bin("dit-gen") + " --progress none -m " + data_path("dit-tiny") +
                    " -p 1 --steps 1 --tp 2 --ulysses 4 -t 1 -o " + s.file("x.png"));
  CHECK(u.code != 0);
  CHECK(u.err.find("at least 2 per tensor-parallel rank") != std::string::npos);
}

TEST_CASE("parallel: a Ulysses degree above the head count is a clear error", "[parallel][cli]") {
  Scratch s;
  RunResult r = run(bin("dit-gen") + " --progress none -m " + data_path("dit-tiny") + " -p 1 --steps 1 --ulysses 5 -t 1 -o " +
                    s.file("x.png"));
  INFO(r.err);
  CHECK(r.code != 0);
  CHECK(r.err.find("--ulysses 5: the model has 4 attention heads, so the Ulysses degree can be at most 4") !=
        std::string::npos);
  CHECK(r.err.find(" ranks, mesh") == std::string::npos);  // refused before the layout is printed
  CHECK_FALSE(std::filesystem::exists(s.file("x.png")));
}

TEST_CASE("parallel: --cfg-parallel without guidance is an error that says why", "[parallel][cli]") {
  Scratch s;
  RunResult r = run(bin("dit-gen") + " --progress none -m " + data_path("dit-tiny") + " -p 1 -g 1 --cfg-parallel -o " +
                    s.file("x.png"));
  CHECK(r.code != 0);
  CHECK(r.err.find("guidance") != std::string::npos);
}

TEST_CASE("parallel: a rank that cannot load its model stops the others, which name it", "[parallel][cli]") {
  // Ranks started by hand (as mpirun or a script would), rank 1 with a model path that does
  // not exist on its machine: rank 0 has connected and must not wait for the timeout, nor
  // linger after it has read rank 1's failure (it once re-posted it in a new generation
  // and waited 5 s there; and once, misreading a half-written marker, waited out the 60 s
  // timeout in a generation of its own).
  Scratch s;
  const std::string env = "DIT_WORLD_SIZE=2 DIT_RENDEZVOUS=file:" + s.file("rdzv") + " ";
  const std::string args = " --progress none -p 1 --ulysses 2 --timeout 60 -o " + s.file("x.png");
  std::filesystem::create_directory(s.file("rdzv"));
  const std::string cmd = "( (DIT_RANK=1 " + env + bin("dit-gen") + " -m " + s.file("nope") + args + " 2> " +
                          s.file("r1.err") + "; echo $? > " + s.file("r1.code") + ") & DIT_RANK=0 " + env +
                          bin("dit-gen") + " -m " + data_path("dit-tiny") + args + "; rc=$?; wait; exit $rc )";
  const auto t0 = std::chrono::steady_clock::now();
  RunResult r = run(cmd);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.err << "\nrank 1: " << slurp(s.file("r1.err")));
  CHECK(r.code == 1);
  CHECK(seconds < 4);  // about 0.1 s
  CHECK(r.err.find("rank 1 failed: model directory '" + s.file("nope") + "' does not exist") != std::string::npos);
  CHECK(slurp(s.file("r1.code")) == "1\n");
  CHECK(slurp(s.file("r1.err")).find("does not exist") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(s.file("x.png")));
}
