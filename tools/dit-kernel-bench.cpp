// dit-kernel-bench: throughput of the runtime kernels at DiT-XL/2 sizes, as JSON.
//
//   dit-kernel-bench --threads 2 --runs 7
//
// Reports GFLOP/s (median of --runs timed runs after --warmup untimed ones) for a big
// square oneDNN matmul (the machine's GEMM peak), the DiT block's Linear layers (f32 and
// bf16, 256 and 1024 tokens, batch 2), attention (16 heads x 72, or --head-dim, 256/1024/4096 tokens), the
// modulated LayerNorm (f32, and bf16 for a bf16 Linear), and the VAE's 3x3 convolutions (channels last, as the decoder runs them, and the NCHW paths).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "parallel/strided_block.h"
#include "runtime/attention.h"
#include "runtime/profile.h"
#include "runtime/conv2d.h"
#include "runtime/conv2d_winograd_bf16.h"
#include "runtime/engine.h"
#include "runtime/gemm_probe.h"
#include "runtime/error.h"
#include "runtime/linear.h"
#include "runtime/elementwise.h"
#include "runtime/norm.h"
#include "runtime/parallel_for.h"
#include "tools/parse_args.h"

using namespace dit;
using json = nlohmann::ordered_json;

namespace {

int g_runs = 7, g_warmup = 2;

double median_seconds(const std::function<void()>& f, int runs = -1) {
  if (runs < 0) runs = g_runs;
  for (int i = 0; i < g_warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor random_tensor(const Shape& shape, uint32_t seed, float amp = 0.05f) {
  Tensor t = Tensor::empty(shape);
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-amp, amp);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(g);
  return t;
}

json gemm_peak(int64_t n, DType c) {
  GemmProbe probe(n, n, n, c);
  std::vector<double> g = probe.run(g_runs);
  std::sort(g.begin(), g.end());
  const double gflops = g[g.size() / 2];
  return {{"op", "matmul_square_prepacked"}, {"n", n},         {"dtype", dtype_name(c)},
          {"ms", 2.0 * n * n * n / gflops / 1e6},      {"gflops", gflops}, {"impl", probe.impl_info()}};
}

// One of a block's linears as the model runs it (DiT-XL/2 sizes, batch 2).
struct LinearCase {
  const char* name;
  int64_t in, out;
  Act act = Act::None;
  bool gated = false;
  // The split Q, K and V projections: one of three matmuls writing a column block of a
  // [rows, 3·out] buffer, reading bf16 rows and writing bf16 in bf16 (SelfAttention's qkv_dtype).
  bool qkv_block = false;
};

// The block's linears in the order it runs them.
const LinearCase kBlockLinears[] = {
    {"qkv", 1152, 3456},
    {"q_of_split_qkv", 1152, 1152, Act::None, false, true},
    {"attn_out_gated", 1152, 1152, Act::None, true},
    {"fc1_gelu", 1152, 4608, Act::GeluTanh},
    {"fc2_gated", 4608, 1152, Act::None, true},
};

json bench_linear(const LinearCase& lc, int64_t tokens, DType c, bool pack = false, bool gate_after = false) {
  const int64_t B = 2;
  Tensor w = random_tensor({lc.out, lc.in}, 3), bias = random_tensor({lc.out}, 4);
  LinearWeight lw = LinearWeight::prepare(w, bias, c);
  LinearSpec s;
  s.batch = B;
  s.rows = tokens;
  s.in = lc.in;
  s.out = lc.out;
  s.act = lc.act;
  s.gated_residual = lc.gated;
  s.pack_weights = pack;
  s.gate_after_matmul = gate_after;
  const bool io16 = lc.qkv_block && c == DType::BF16;
  if (lc.qkv_block) s.out_stride = 3 * lc.out;
  if (io16) s.input = s.output = DType::BF16;
  Linear lin(s, lw);
  const int64_t ldy = s.out_stride ? s.out_stride : lc.out;
  Tensor x = random_tensor({B, tokens, lc.in}, 5, 1.f), y = random_tensor({B, tokens, ldy}, 6, 1.f),
         gate = random_tensor({B, lc.out}, 7, 1.f);
  Tensor x16 = io16 ? x.to(DType::BF16) : Tensor(), y16 = io16 ? y.to(DType::BF16) : Tensor();
  double sec = median_seconds([&] {
    if (io16)
      lin.run(x16.bf16(), y16.bf16());
    else
      lin.run(x.f32(), y.f32(), gate.f32());
  });
  json j = {{"op", std::string("linear_") + lc.name + (pack ? "_packed" : "")},
            {"tokens", tokens},
            {"batch", B},
            {"in", lc.in},
            {"out", lc.out},
            {"dtype", dtype_name(c)},
            {"ms", sec * 1e3},
            {"gflops", lin.flops() / sec / 1e9},
            {"impl", lin.impl_info()}};
  // the gated forms: the gate and the residual sum as the matmul's post-ops, or in a pass after
  // a plain matmul (--gate-after-matmul)
  if (lc.gated) j["gate"] = gate_after ? "after_matmul" : "post_ops";
  return j;
}

// bf16: q, k, v given in bf16 and the output written in bf16, as a block's projection and
// local attention exchange them. dense: run_dense over q, k, v planes [B, H, T, D] made once,
// as Ulysses and the ring hand them over (a padded Q·Kᵀ pads each block as it goes).
json bench_attention(int64_t tokens, int64_t B, DType c, int64_t qb = 0, int64_t kb = 0, int64_t D = 72,
                     bool scale_in_qk = false, QkPad pad = QkPad::Auto, bool dense = false) {
  const int64_t H = 16;
  AttentionSpec s;
  s.batch = B;
  s.heads = H;
  s.q_len = s.kv_len = tokens;
  s.head_dim = D;
  s.compute = c;
  s.q_block = qb;
  s.kv_block = kb;
  s.bf16_scale_in_qk = scale_in_qk;
  s.bf16_qk_pad = pad;
  if (!dense) s.q = s.k = s.v = AttnLayout::bthd(tokens, D, H, 3 * H * D);  // fused QKV, as in the model
  s.out = AttnLayout::bthd(tokens, D, H, H * D);
  Attention attn(s);
  Tensor qkv = random_tensor({B, tokens, 3 * H * D}, 8, 1.f), out = Tensor::empty({B, tokens, H * D}, c);
  if (c == DType::BF16) qkv = qkv.to(DType::BF16);
  Tensor planes, out32;  // dense: q, k, v each [B, H, T, D] in the compute type; an f32 output
  if (dense) {
    planes = random_tensor({3, B, H, tokens, D}, 8, 1.f).to(c);
    out32 = Tensor::empty({B, tokens, H * D});
  }
  const size_t plane = size_t(B * H * tokens * D) * (c == DType::BF16 ? 2 : 4);
  int runs = tokens >= 4096 ? std::max(3, g_runs / 2) : g_runs;
  double sec = median_seconds(
      [&] {
        if (dense) {
          const char* p = static_cast<const char*>(planes.data());
          attn.run_dense(p, p + plane, p + 2 * plane, out32.f32(), nullptr);
        } else if (c == DType::BF16) {
          const uint16_t* p = qkv.bf16();
          attn.run(p, p + H * D, p + 2 * H * D, out.bf16(), nullptr);
        } else {
          const float* p = qkv.f32();
          attn.run(p, p + H * D, p + 2 * H * D, out.f32(), nullptr);
        }
      },
      runs);
  json j = {{"op", "attention"}, {"tokens", tokens}, {"batch", B},   {"heads", H},
            {"head_dim", D},     {"dtype", dtype_name(c)}, {"ms", sec * 1e3}, {"gflops", attn.flops() / sec / 1e9}};
  // where the softmax scale is applied: by the Q·Kᵀ matmul (f32, and bf16 with
  // --bf16-scale-in-qk) or by the softmax (bf16)
  j["scale_in"] = c == DType::BF16 && !scale_in_qk ? "softmax" : "qk_matmul";
  // the head_dim Q·Kᵀ reduces over: head_dim, or zero-padded to a multiple of 32 (--bf16-pad-qk)
  j["qk_head_dim"] = attn.qk_head_dim();
  j["form"] = dense ? "dense" : "rows";  // run_dense over planes made once, or run() over the QKV rows
  if (qb || kb) {
    j["q_block"] = qb;
    j["kv_block"] = kb;
  }

  // Shares of the threads' summed time (runtime/attention.h, AttentionPhases), warm-up included.
  const AttentionPhases ph = attn.phases();
  for (int i = 0; i < profile::kAttentionPhases; ++i)
    j["phases"][profile::kAttentionPhaseNames[i]] = ph.values()[size_t(i)] / ph.total();
  j["impl"] = attn.impl_info();
  return j;
}

// The bf16 Winograd plan's batched matmul alone, at the shape of one of its pieces (16 x [the
// piece's tiles, C] x [C, O], runtime/conv2d_winograd_bf16.h): its GFLOP/s, and the share of
// the convolution's `sec` the pieces' matmuls would take at that rate ("matmul_share"; the
// rest is the transforms and the passes' barriers).
void add_winograd_bf16_matmul(json& row, const Conv2dSpec& s, double sec) {
  Conv2dWorkspace ws;
  const std::unique_ptr<WinogradBf16Plan> plan = WinogradBf16Plan::make(s, true, ws);
  if (!plan) return;
  const int64_t P = plan->points(), tiles = plan->piece_tiles(), C = s.in_channels, O = s.out_channels;
  std::vector<double> g = GemmProbe(tiles, C, O, DType::BF16, P).run(g_runs);
  std::sort(g.begin(), g.end());
  const double gflops = g[g.size() / 2];
  const double matmul_s = double(plan->pieces()) * 2.0 * double(P * tiles * C * O) / (gflops * 1e9);
  row["matmul_shape"] = {P, tiles, C, O};
  row["matmul_gflops"] = gflops;
  row["matmul_share"] = matmul_s / sec;
}

// A 3x3 convolution at VAE sizes. layout: "blocked" (NCHW x and y reordered to oneDNN's
// blocked layout and back in each run), "nchw" (in place), "nhwc" (channels last in place:
// the VAE decoder's direct form; with bf16 compute x is given in bf16, as GroupNorm writes it
// there), "nhwc_winograd" (the decoder's Winograd form, x f32 with its halo rows, in pieces of
// rows: f32 by oneDNN's F(4x4, 3x3) through blocked copies, runtime/conv2d_winograd.h, "impl" says
// whether oneDNN had it; bf16 by F(2x2, 3x3) with a bf16 matmul, runtime/conv2d_winograd_bf16.h).
json bench_conv(int64_t ch, int64_t hw, const std::string& layout, DType c) {
  Conv2dSpec s;
  s.compute = c;
  s.in_channels = s.out_channels = ch;
  s.height = s.width = hw;
  s.kernel = 3;
  s.padding = 1;
  s.blocked = layout == "blocked";
  s.nhwc = layout == "nhwc" || layout == "nhwc_winograd";
  s.winograd = layout == "nhwc_winograd";
  s.input = s.nhwc && !s.winograd ? c : DType::F32;
  if (s.winograd) {
    s.height = hw + 2;  // the halo rows
    s.pad_rows = 0;
  }
  Conv2d conv(s, random_tensor({ch, ch, 3, 3}, 9), random_tensor({ch}, 10));
  Tensor x = random_tensor({1, ch, s.height, hw}, 11, 1.f), y = Tensor::empty({1, ch, hw, hw});
  if (s.input == DType::BF16) x = x.to(DType::BF16);
  double sec = median_seconds([&] {
    if (s.input == DType::BF16)
      conv.run(x.bf16(), y.f32());
    else
      conv.run(x.f32(), y.f32());
  });
  const double fl = 2.0 * ch * ch * 9 * hw * hw;
  json row = {{"op", "conv3x3_" + layout}, {"channels", ch}, {"hw", hw}, {"dtype", dtype_name(c)},
              {"ms", sec * 1e3}, {"gflops", fl / sec / 1e9}, {"impl", conv.impl_info()}};
  if (s.winograd && c == DType::BF16 && conv.uses_winograd()) add_winograd_bf16_matmul(row, s, sec);
  return row;
}

// The collectives' copies (parallel/strided_block.h): a Ulysses-like strided block, 576 of every
// 1152 floats of 4096 rows per batch item (19 MB), copied into a dense buffer by copy_block
// on one thread and by copy_block_parallel on the whole team, in GB/s of bytes copied.
json bench_copy() {
  const size_t rows = 2 * 4096, width = 576, stride = 1152, n = rows * width;
  std::vector<float> src(rows * stride, 1.f), dst(n, 0.f);
  const StridedBlock a{0, rows, width, stride};
  const double one = median_seconds([&] { copy_block(src.data(), a, 0, dst.data(), kFlat, 0, n); });
  const double team = median_seconds([&] { copy_block_parallel(src.data(), a, 0, dst.data(), kFlat, 0, n); });
  const double gb = double(n) * 4 / 1e9;
  return {{"op", "copy"}, {"what", "strided block [8192 rows x 576 of 1152 floats] -> dense"}, {"mb", gb * 1e3},
          {"gbps_one_thread", gb / one}, {"gbps_team", gb / team}, {"team_threads", omp_get_max_threads()},
          {"team_vs_one", one / team}};
}

// The block's modulated LayerNorm over [2, tokens, 1152] as a bf16 Linear's input: oneDNN's
// f32 norm then the conversion the Linear made of it (the path before the bf16 norm), and the
// norm writing bf16 itself. Milliseconds, and GB/s of the bytes each must move at least.
json bench_norm(int64_t tokens) {
  const int64_t B = 2, D = 1152, n = B * tokens * D;
  Tensor x = random_tensor({B, tokens, D}, 11, 2.f), shift = random_tensor({B, D}, 12), scale = random_tensor({B, D}, 13);
  Tensor y = Tensor::empty({B, tokens, D}), y16 = Tensor::empty({B, tokens, D}, DType::BF16);
  LayerNormModulate ln(B, tokens, D, 1e-6f);
  const double f32 = median_seconds([&] { ln.run(x.f32(), y.f32(), shift.f32(), scale.f32()); });
  const double f32_cvt = median_seconds([&] {
    ln.run(x.f32(), y.f32(), shift.f32(), scale.f32());
    parallel_for(B * tokens, true, [&](int64_t r) { to_bf16(y.f32() + r * D, y16.bf16() + r * D, D); });
  });
  const double bf16 = median_seconds([&] { ln.run(x.f32(), y16.bf16(), shift.f32(), scale.f32()); });
  const double gb16 = double(n) * 6 / 1e9;  // read x, write y in bf16
  return {{"op", "layernorm_modulate"}, {"tokens", tokens}, {"batch", B}, {"dim", D},
          {"f32_ms", f32 * 1e3}, {"f32_then_bf16_ms", f32_cvt * 1e3}, {"bf16_ms", bf16 * 1e3},
          {"bf16_gbps", gb16 / bf16}, {"bf16_vs_f32_then_bf16", f32_cvt / bf16}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dit-kernel-bench: GFLOP/s of the dit-gen kernels at DiT-XL/2 sizes (JSON on stdout)"};
  int threads = 0;
  bool sweep = false, skip_4096 = false, packed = false, scale_in_qk = false, pad_qk = false, gate_after = false,
       dense = false;
  std::string only;
  std::vector<int64_t> head_dims{72};
  app.add_option("-t,--threads", threads, "threads, 1..4096 (default: OpenMP default)")->check(CLI::Range(1, 4096));
  app.add_option("--runs", g_runs, "timed runs per measurement (median reported)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", g_warmup, "untimed warm-up runs")->check(CLI::Range(0, 100000))->capture_default_str();
  app.add_option("--only", only,
                 "run only: gemm, linear, attention, norm, conv, copy (the collectives' copies, one thread against all)")
      ->check(CLI::IsMember({"gemm", "linear", "attention", "norm", "conv", "copy"}));
  app.add_flag("--sweep", sweep, "also sweep attention block sizes at 1024 tokens");
  app.add_flag("--no-4096", skip_4096, "skip the 4096-token attention");
  app.add_option("--head-dim", head_dims,
                 "attention: head sizes to time, comma-separated (16 heads each; default 72, DiT-XL/2's). "
                 "Q·Kᵀ reduces over the head size: e.g. 72,96 shows what a zero-padded 72 would cost")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(512)));
  app.add_flag("--bf16-scale-in-qk", scale_in_qk,
               "attention: also time bf16 with the softmax scale applied by the Q·Kᵀ matmul (an output scale), "
               "as before the softmax took it over (rows with \"scale_in\": \"qk_matmul\")");
  app.add_flag("--bf16-pad-qk", pad_qk,
               "attention: also time bf16 in the form the runtime does not choose on this machine: Q and K "
               "zero-padded for Q·Kᵀ to a head_dim that is a multiple of 32 (AMX's bf16 tile depth; P·V keeps "
               "head_dim; chosen where oneDNN uses AMX, or as DIT_BF16_QK_PAD=on|off|auto says), or unpadded "
               "(\"qk_head_dim\" tells which)");
  app.add_flag("--dense", dense,
               "attention: also time each row's attention over q, k, v planes made once (run_dense, the form "
               "Ulysses and the ring hand over; a padded Q·Kᵀ pads each block as it goes) (\"form\": \"dense\")");
  app.add_flag("--packed", packed, "also time Linear with weights reordered into the matmul's preferred layout");
  app.add_flag("--gate-after-matmul", gate_after,
               "linear: also time the gated linears with the gate and the residual sum in a pass after a plain "
               "matmul instead of as its post-ops (rows with \"gate\": \"after_matmul\")");
  if (auto rc = dit::parse_args(app, argc, argv, "dit-kernel-bench")) return *rc;
  try {
    if (threads > 0) set_num_threads(threads);
    json res;
    res["threads"] = num_threads();
    res["runs"] = g_runs;
    // bf16 rows only where oneDNN can compute bf16 here (AVX-512); the JSON says so otherwise.
    std::vector<DType> types{DType::F32};
    if (compute_supported(DType::BF16)) types.push_back(DType::BF16);
    else res["bf16"] = "not available on this CPU";
    json rows = json::array();
    if (only.empty() || only == "gemm")
      for (DType c : types) rows.push_back(gemm_peak(2048, c));
    if (only.empty() || only == "linear")
      for (DType c : types)
        for (int64_t t : {256, 1024})
          for (bool pack : {false, true}) {
            if (pack && !packed) continue;
            for (const LinearCase& lc : kBlockLinears) {
              rows.push_back(bench_linear(lc, t, c, pack));
              if (lc.gated && gate_after) rows.push_back(bench_linear(lc, t, c, pack, true));
            }
          }
    if (only.empty() || only == "attention") {
      for (int64_t d : head_dims)
        for (DType c : types)
          for (int64_t t : {256, 1024, 4096}) {
            if (t == 4096 && skip_4096) continue;
            const QkPad other = qk_pad_by_default() ? QkPad::Off : QkPad::On;  // the form not chosen here
            for (bool form : {false, true}) {
              if (form && !dense) continue;
              rows.push_back(bench_attention(t, 2, c, 0, 0, d, false, QkPad::Auto, form));
              if (c == DType::BF16 && scale_in_qk && !form) rows.push_back(bench_attention(t, 2, c, 0, 0, d, true));
              if (c == DType::BF16 && pad_qk) rows.push_back(bench_attention(t, 2, c, 0, 0, d, false, other, form));
            }
          }
      if (sweep)
        for (DType c : types)
          for (int64_t qb : {32, 64, 128, 256, 512})
            for (int64_t kb : {128, 256, 512, 1024}) rows.push_back(bench_attention(1024, 2, c, qb, kb));
    }
    if (only.empty() || only == "norm")
      for (int64_t t : {1024, 4096}) rows.push_back(bench_norm(t));
    if (only.empty() || only == "conv")
      for (auto [ch, hw] : {std::pair<int64_t, int64_t>{512, 32}, {256, 128}, {128, 256}})
        for (DType c : types)
          for (const char* layout : {"nhwc", "nhwc_winograd", "blocked", "nchw"})
            if (c == DType::F32 || std::string(layout) != "nchw")
              rows.push_back(bench_conv(ch, hw, layout, c));  // bf16 converts an NCHW x in a reorder
    if (only.empty() || only == "copy") rows.push_back(bench_copy());
    res["results"] = rows;
    std::printf("%s\n", res.dump(1).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dit-kernel-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
