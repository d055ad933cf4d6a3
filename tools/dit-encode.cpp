// dit-encode: the T5 text encoding of a prompt, as PixArt's pipelines compute it, from a
// diffusers pipeline directory (DIR/tokenizer and DIR/text_encoder).
//
//   dit-encode -m /models/PixArt-Sigma -p "a red fox in the snow" -o fox.npy   # fox.npy + fox.mask.npy
//   dit-encode -m /models/PixArt-Sigma -p "a red fox" --ids                    # tokens as one JSON line
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "models/t5/prompt_encoder.h"
#include "runtime/atomic_file.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/npy.h"
#include "tools/parse_args.h"
#include "tools/cli/options.h"

namespace {

// FILE.npy -> FILE.mask.npy; any other name gets ".mask.npy" appended.
std::string mask_path(const std::string& out) {
  const std::string ext = ".npy";
  if (out.size() > ext.size() && out.compare(out.size() - ext.size(), ext.size(), ext) == 0)
    return out.substr(0, out.size() - ext.size()) + ".mask.npy";
  return out + ".mask.npy";
}

}  // namespace

int main(int argc, char** argv) {
  dit::remove_partial_files_on_signal();
  std::string model, prompt, output, dtype = "f32";
  int64_t max_length = 0;
  int threads = 0;
  bool ids_only = false, raw = false;
  CLI::App app{
      "dit-encode: the T5 text encoder's last hidden states for a prompt, as PixArt-alpha/Sigma pipelines compute "
      "them (T5EncoderModel(ids, attention_mask)[0]), from a diffusers pipeline directory: DIR/tokenizer "
      "(spiece.model) and DIR/text_encoder (config.json + safetensors, F32/BF16/F16, single file or sharded).\n"
      "The prompt is lower-cased and stripped (the pipelines' preprocessing) unless --raw, tokenized to exactly "
      "--max-length tokens (pieces, truncated if needed, then </s>, then <pad>) and encoded. Writes FILE (float32 "
      "[max_length, d_model], padded positions included) and the attention mask as FILE.mask.npy (float32 0/1 "
      "[max_length]; FILE without .npy gets .mask.npy appended)."};
  app.add_option("-m,--model", model, "diffusers pipeline directory")->required();
  app.add_option("-p,--prompt", prompt, "the prompt (UTF-8)")->required();
  auto* len_opt = app.add_option("--max-length", max_length,
                                 "tokens (1..4096); default: 300 for PixArtSigmaPipeline, 120 for PixArtAlphaPipeline "
                                 "(model_index.json's _class_name), 300 otherwise");
  auto* out_opt = app.add_option("-o,--output", output, "output .npy file (required unless --ids)");
  app.add_flag("--ids", ids_only, "print the pieces, ids and mask as one JSON line instead (no -o needed, no weights read)");
  app.add_flag("--raw", raw, "skip the lower-casing and stripping");
  app.add_option("--dtype", dtype, "compute type: f32|bf16 (weights stored in another type are converted once)")->capture_default_str();
  app.add_option("-t,--threads", threads, "threads (default: all cores)")->check(CLI::Range(1, 4096));
  app.set_version_flag("--version", std::string("dit-encode ") + DIT_VERSION);
  if (auto rc = dit::parse_args(app, argc, argv, "dit-encode")) return *rc;  // errors: one line
  try {
    const dit::DType compute = dit::parse_compute_type("--dtype", dtype);
    if (threads != 0) {
      DIT_CHECK(threads >= 1 && threads <= 4096, "--threads must be in 1..4096, found " << threads);
      dit::set_num_threads(threads);
    }
    if (!ids_only) {
      DIT_CHECK(out_opt->count() > 0, "-o/--output FILE.npy is required (or --ids to print the tokens)");
      dit::cli::check_output_path(output, "--output", &dit::cli::kNpyOutput);
      dit::cli::check_output_path(mask_path(output), "--output (mask file)");
    }
    dit::PromptEncoder pe = dit::PromptEncoder::open(model, compute);
    const int64_t L = len_opt->count() > 0 ? max_length : pe.default_max_length();
    DIT_CHECK(L >= 1 && L <= dit::kT5MaxLength, "--max-length: max length must be in 1.." << dit::kT5MaxLength << ", found " << L);
    if (ids_only) {
      const dit::T5Tokens t = pe.tokenize(prompt, L, raw);
      const nlohmann::ordered_json j = {{"prompt", prompt},       {"preprocessed", pe.preprocess(prompt, raw)},
                                {"max_length", L},        {"pieces", t.pieces},
                                {"input_ids", t.ids},     {"attention_mask", t.mask},
                                {"tokens", t.length},     {"truncated", t.truncated}};
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    const dit::EncodedPrompts e = pe.encode({prompt}, L, raw);
    const dit::T5Tokens& t = e.tokens[0];
    if (t.truncated)
      std::fprintf(stderr, "dit-encode: warning: the prompt has %zu tokens; only the first %lld were kept (+ </s>, "
                           "--max-length %lld)\n", t.pieces.size(), static_cast<long long>(L - 1),
                   static_cast<long long>(L));
    dit::Tensor mask = dit::Tensor::empty({L});
    for (int64_t i = 0; i < L; ++i) mask.f32()[i] = float(t.mask[size_t(i)]);
    const std::string mpath = mask_path(output);
    dit::write_npy(output, e.hidden.reshape({L, pe.config().d_model}));
    try {
      dit::write_npy(mpath, mask);
    } catch (...) {
      std::error_code ec;
      std::filesystem::remove(output, ec);  // no half result
      throw;
    }
    std::fprintf(stderr, "dit-encode: wrote %s [%lld, %lld] and %s (%lld of %lld tokens unmasked)\n", output.c_str(),
                 static_cast<long long>(L), static_cast<long long>(pe.config().d_model), mpath.c_str(),
                 static_cast<long long>(t.length), static_cast<long long>(L));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dit-encode: error: %s\n", e.what());
    return 1;
  }
}
