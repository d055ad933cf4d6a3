// Hostile model directories: corrupt checkpoints, config JSON and tokenizer files (one
// mutation of a copy of tests/data/dit-tiny or pixart-tiny each). See hostile_util.h.
#pragma once

#include <string>
#include <vector>

#include "hostile_util.h"

namespace dit_test::hostile {

namespace files {
const std::string TS = "m/transformer/diffusion_pytorch_model.safetensors";
const std::string VS = "m/vae/diffusion_pytorch_model.safetensors";
const std::string TC = "m/transformer/config.json", VC = "m/vae/config.json";
const std::string SC = "m/scheduler/scheduler_config.json", MI = "m/model_index.json";
const std::string EC = "m/text_encoder/config.json", EI = "m/text_encoder/model.safetensors.index.json";
const std::string E1 = "m/text_encoder/model-00001-of-00002.safetensors";
const std::string E2 = "m/text_encoder/model-00002-of-00002.safetensors";
const std::string SP = "m/tokenizer/spiece.model", TK = "m/tokenizer/tokenizer_config.json";
const std::string DIT = "dit-gen -m {M} -p 1 --steps 2 -o {O}/x.png";
const std::string PIX = "dit-gen -m {M} -p fox --steps 2 -o {O}/x.png";
const std::string ENC = "dit-encode -m {M} -p fox --ids";
const std::string T0 = "pos_embed.proj.bias";  // first tensor of dit-tiny's transformer, 32 floats
}  // namespace files

inline std::vector<Case> checkpoint_cases() {
  using namespace files;
  const std::string tsf = "transformer/diffusion_pytorch_model.safetensors";
  return {
      {"transformer checkpoint empty", "dit-tiny", truncate(TS, 0), DIT, tsf},
      {"checkpoint of 4 bytes", "dit-tiny", truncate(TS, 4), DIT, tsf},
      {"checkpoint of only the length", "dit-tiny", truncate(TS, 8), DIT, tsf},
      {"checkpoint cut inside the header", "dit-tiny", truncate(TS, 100), DIT, tsf},
      {"checkpoint cut in half", "dit-tiny", truncate(TS, 120000), DIT, tsf},
      {"checkpoint one byte short", "dit-tiny", truncate(TS, -1), DIT, tsf},
      {"header length 0", "dit-tiny", st_header_len(TS, 0), DIT, tsf},
      {"header length 2^63", "dit-tiny", st_header_len(TS, uint64_t(1) << 63), DIT, tsf},
      {"header length 2^64-1", "dit-tiny", st_header_len(TS, ~uint64_t(0)), DIT, tsf},
      {"header length past the end", "dit-tiny", st_header_len(TS, 247841), DIT, tsf},
      {"header length too short", "dit-tiny", st_header_len(TS, 100), DIT, tsf},
      {"header not JSON", "dit-tiny", st_header_text(TS, "this is not json at all!"), DIT, tsf},
      {"header a JSON array", "dit-tiny", st_header_text(TS, "[1, 2, 3]"), DIT, tsf},
      {"header a JSON string", "dit-tiny", st_header_text(TS, "\"x\""), DIT, tsf},
      {"header nested 100000 deep", "dit-tiny", st_header_text(TS, std::string(100000, '[') + std::string(100000, ']')),
       DIT, tsf},
      {"header with a NUL byte", "dit-tiny", st_header_text(TS, std::string("{\"a\0\": 1}", 10)), DIT, tsf},
      {"header empty object", "dit-tiny", st_header_text(TS, "{}"), DIT, tsf},
      {"dtype unknown", "dit-tiny", st_entry(TS, T0, "dtype", "\"F99\""), DIT, tsf},
      {"dtype a number", "dit-tiny", st_entry(TS, T0, "dtype", "42"), DIT, tsf},
      {"dtype missing", "dit-tiny", st_entry(TS, T0, "dtype", ""), DIT, tsf},
      {"dtype I64 (wrong for a weight)", "dit-tiny", st_entry(TS, T0, "dtype", "\"I64\""), DIT, T0},
      {"dtype F16 with the F32 bytes", "dit-tiny", st_entry(TS, T0, "dtype", "\"F16\""), DIT, tsf},
      {"dtype BOOL", "dit-tiny", st_entry(TS, T0, "dtype", "\"BOOL\""), DIT, tsf},
      {"shape negative", "dit-tiny", st_entry(TS, T0, "shape", "[-1, 32]"), DIT, tsf},
      {"shape overflowing int64", "dit-tiny", st_entry(TS, T0, "shape", "[4611686018427387904, 4611686018427387904]"),
       DIT, tsf},
      {"shape fractional", "dit-tiny", st_entry(TS, T0, "shape", "[32.5]"), DIT, tsf},
      {"shape a string", "dit-tiny", st_entry(TS, T0, "shape", "\"32\""), DIT, tsf},
      {"shape does not match the bytes", "dit-tiny", st_entry(TS, T0, "shape", "[33]"), DIT, tsf},
      {"shape wrong for the model", "dit-tiny", st_entry(TS, T0, "shape", "[16, 2]"), DIT, T0},
      {"shape 9 dimensions", "dit-tiny", st_entry(TS, T0, "shape", "[1,1,1,1,1,1,1,2,16]"), DIT, T0},
      {"offsets reversed", "dit-tiny", st_entry(TS, T0, "data_offsets", "[128, 0]"), DIT, tsf},
      {"offsets past the end", "dit-tiny", st_entry(TS, T0, "data_offsets", "[0, 1000000000000]"), DIT, tsf},
      {"offsets negative", "dit-tiny", st_entry(TS, T0, "data_offsets", "[-128, 0]"), DIT, tsf},
      {"offsets one number", "dit-tiny", st_entry(TS, T0, "data_offsets", "[0]"), DIT, tsf},
      {"offsets missing", "dit-tiny", st_entry(TS, T0, "data_offsets", ""), DIT, tsf},
      {"offsets near 2^64", "dit-tiny", st_entry(TS, T0, "data_offsets", "[18446744073709551488, 18446744073709551615]"),
       DIT, tsf},
      {"entry not an object", "dit-tiny", st_header(TS, [](nlohmann::json& h) { h[T0] = "x"; }), DIT, tsf},
      {"metadata not an object", "dit-tiny", st_header(TS, [](nlohmann::json& h) { h["__metadata__"] = 5; }), DIT, tsf},
      {"a tensor missing", "dit-tiny", st_header(TS, [](nlohmann::json& h) { h.erase(T0); }), DIT, tsf},
      {"checkpoint missing", "dit-tiny", remove(TS), DIT, "transformer"},
      {"checkpoint a directory", "dit-tiny", make_dir(TS), DIT, "diffusion_pytorch_model.safetensors"},
      {"checkpoint a FIFO", "dit-tiny", make_fifo(TS), DIT, "diffusion_pytorch_model.safetensors"},
      {"checkpoint a symlink loop", "dit-tiny", make_symlink(TS, "diffusion_pytorch_model.safetensors"), DIT,
       "diffusion_pytorch_model.safetensors"},
      {"VAE checkpoint cut in half", "dit-tiny", truncate(VS, 800000), DIT, "vae/diffusion_pytorch_model.safetensors"},
      {"VAE checkpoint missing", "dit-tiny", remove(VS), DIT, "vae"},
      {"VAE tensor of the wrong shape", "dit-tiny", st_entry(VS, "decoder.conv_in.bias", "shape", "[32, 2]"), DIT,
       "decoder.conv_in.bias"},
      {"text-encoder shard missing", "pixart-tiny", remove(E2), "dit-encode -m {M} -p fox -o {O}/e.npy",
       "model-00002-of-00002"},
      {"text-encoder shard cut", "pixart-tiny", truncate(E1, 5000), PIX, "model-00001-of-00002.safetensors"},
      {"text-encoder index not JSON", "pixart-tiny", put(EI, "{\"weight_map\": "), PIX, "model.safetensors.index.json"},
      {"index weight_map a list", "pixart-tiny", set_key(EI, "weight_map", "[]"), PIX, "model.safetensors.index.json"},
      {"index names a missing shard", "pixart-tiny", set_key(EI, "weight_map/shared.weight", "\"nope.safetensors\""), PIX,
       "nope.safetensors"},
      {"index shard path escapes", "pixart-tiny", set_key(EI, "weight_map/shared.weight", "\"../../etc/passwd\""), PIX,
       "index.json"},
      {"index forgets a tensor", "pixart-tiny", erase_key(EI, "weight_map/shared.weight"), PIX, "shared.weight"},
      {"PixArt transformer cut", "pixart-tiny", truncate(TS, 1000), PIX, tsf},
  };
}

inline std::vector<Case> config_cases() {
  using namespace files;
  const std::string tc = "transformer/config.json", vc = "vae/config.json", sc = "scheduler_config.json";
  const std::string mi = "model_index.json", ec = "text_encoder/config.json";
  return {
      {"num_layers a string", "dit-tiny", set_key(TC, "num_layers", "\"2\""), DIT, tc + "|num_layers"},
      {"num_layers -1", "dit-tiny", set_key(TC, "num_layers", "-1"), DIT, tc + "|num_layers"},
      {"num_layers 0", "dit-tiny", set_key(TC, "num_layers", "0"), DIT, tc + "|num_layers"},
      {"num_layers 1e10", "dit-tiny", set_key(TC, "num_layers", "1e10"), DIT, tc + "|num_layers"},
      {"num_layers NaN", "dit-tiny", set_key(TC, "num_layers", "NaN"), DIT, tc},
      {"num_layers 2.5", "dit-tiny", set_key(TC, "num_layers", "2.5"), DIT, tc + "|num_layers"},
      {"num_layers 3 (weights for 2)", "dit-tiny", set_key(TC, "num_layers", "3"), DIT, "transformer_blocks.2"},
      {"num_layers missing", "dit-tiny", erase_key(TC, "num_layers"), DIT, "diffusion_pytorch_model.safetensors"},
      {"heads 0", "dit-tiny", set_key(TC, "num_attention_heads", "0"), DIT, tc + "|num_attention_heads"},
      {"heads -4", "dit-tiny", set_key(TC, "num_attention_heads", "-4"), DIT, tc + "|num_attention_heads"},
      {"heads 2^31", "dit-tiny", set_key(TC, "num_attention_heads", "2147483648"), DIT, tc + "|num_attention_heads"},
      {"head dim 0", "dit-tiny", set_key(TC, "attention_head_dim", "0"), DIT, tc + "|attention_head_dim"},
      {"heads x dim overflow", "dit-tiny",
       both(set_key(TC, "num_attention_heads", "65536"), set_key(TC, "attention_head_dim", "65536")), DIT, tc},
      {"patch_size 0", "dit-tiny", set_key(TC, "patch_size", "0"), DIT, tc + "|patch_size"},
      {"patch_size 3", "dit-tiny", set_key(TC, "patch_size", "3"), DIT, "patch_size"},
      {"sample_size -8", "dit-tiny", set_key(TC, "sample_size", "-8"), DIT, tc + "|sample_size"},
      {"sample_size 1e9", "dit-tiny", set_key(TC, "sample_size", "1000000000"), DIT, "sample_size"},
      {"in_channels 0", "dit-tiny", set_key(TC, "in_channels", "0"), DIT, tc + "|in_channels"},
      {"out_channels 3", "dit-tiny", set_key(TC, "out_channels", "3"), DIT, "out_channels"},
      {"classes 0", "dit-tiny", set_key(TC, "num_embeds_ada_norm", "0"), DIT, tc + "|num_embeds_ada_norm"},
      {"norm_type unknown", "dit-tiny", set_key(TC, "norm_type", "\"layer_norm\""), DIT, "norm_type"},
      {"activation unknown", "dit-tiny", set_key(TC, "activation_fn", "\"swish\""), DIT, "activation_fn"},
      {"transformer config not JSON", "dit-tiny", put(TC, "{\"num_layers\": 2,"), DIT, tc},
      {"transformer config empty", "dit-tiny", put(TC, ""), DIT, tc},
      {"transformer config an array", "dit-tiny", put(TC, "[]"), DIT, tc},
      {"transformer config binary", "dit-tiny", put(TC, std::string("\x00\xff\xfe\x01", 4)), DIT, tc},
      {"transformer config missing", "dit-tiny", remove(TC), DIT, tc},
      {"transformer config a directory", "dit-tiny", make_dir(TC), DIT, tc},
      {"transformer config a FIFO", "dit-tiny", make_fifo(TC), DIT, tc},
      {"VAE channels empty", "dit-tiny", set_key(VC, "block_out_channels", "[]"), DIT, vc + "|block_out_channels"},
      {"VAE channels with a string", "dit-tiny", set_key(VC, "block_out_channels", "[32, \"x\"]"), DIT,
       vc + "|block_out_channels"},
      {"VAE channels negative", "dit-tiny", set_key(VC, "block_out_channels", "[-32, 64]"), DIT, vc},
      {"VAE latent_channels 0", "dit-tiny", set_key(VC, "latent_channels", "0"), DIT, vc + "|latent_channels"},
      {"VAE groups 0", "dit-tiny", set_key(VC, "norm_num_groups", "0"), DIT, vc + "|norm_num_groups"},
      {"VAE groups 7", "dit-tiny", set_key(VC, "norm_num_groups", "7"), DIT, "norm_num_groups"},
      {"VAE layers_per_block -1", "dit-tiny", set_key(VC, "layers_per_block", "-1"), DIT, vc + "|layers_per_block"},
      {"VAE scaling_factor NaN", "dit-tiny", set_key(VC, "scaling_factor", "NaN"), DIT, vc + "|scaling_factor"},
      {"VAE scaling_factor 0", "dit-tiny", set_key(VC, "scaling_factor", "0"), DIT, vc + "|scaling_factor"},
      {"VAE config missing", "dit-tiny", remove(VC), DIT, vc},
      {"timesteps 0", "dit-tiny", set_key(SC, "num_train_timesteps", "0"), DIT, sc + "|num_train_timesteps"},
      {"timesteps 1e13", "dit-tiny", set_key(SC, "num_train_timesteps", "1.2e13"), DIT, sc + "|num_train_timesteps"},
      {"beta_start NaN", "dit-tiny", set_key(SC, "beta_start", "NaN"), DIT, sc + "|beta_start"},
      {"beta_end Infinity", "dit-tiny", set_key(SC, "beta_end", "Infinity"), DIT, sc + "|beta_end"},
      {"beta_end negative", "dit-tiny", set_key(SC, "beta_end", "-0.02"), DIT, sc},
      {"beta_schedule unknown", "dit-tiny", set_key(SC, "beta_schedule", "\"cosine\""), DIT, sc + "|beta_schedule"},
      {"scheduler class unknown", "dit-tiny", set_key(SC, "_class_name", "\"PNDMScheduler\""), DIT, sc},
      {"prediction_type unknown", "dit-tiny", set_key(SC, "prediction_type", "\"bogus\""), DIT, sc + "|prediction_type"},
      {"trained_betas a string", "dit-tiny", set_key(SC, "trained_betas", "\"x\""), DIT, sc + "|trained_betas"},
      {"trained_betas with NaN", "dit-tiny", set_key(SC, "trained_betas", "[0.1, NaN]"), DIT, sc},
      {"steps_offset -5", "dit-tiny", set_key(SC, "steps_offset", "-5"), DIT, sc + "|steps_offset"},
      {"steps_offset 1e6", "dit-tiny", set_key(SC, "steps_offset", "1000000"), DIT, sc + "|steps_offset"},
      {"scheduler config missing", "dit-tiny", remove(SC), DIT, sc},
      {"model_index not JSON", "dit-tiny", put(MI, "{"), DIT, mi},
      {"model_index missing", "dit-tiny", remove(MI), DIT, mi},
      {"model_index an array", "dit-tiny", put(MI, "[1]"), DIT, mi},
      {"id2label a list", "dit-tiny", set_key(MI, "id2label", "[\"a\"]"), DIT, mi + "|id2label"},
      {"id2label key not a number", "dit-tiny", set_key(MI, "id2label/x", "\"zebra\""), DIT, mi + "|id2label"},
      {"id2label key huge", "dit-tiny", set_key(MI, "id2label/99999999999999", "\"zebra\""), DIT, mi + "|id2label"},
      {"id2label key negative", "dit-tiny", set_key(MI, "id2label/-1", "\"zebra\""), DIT, mi + "|id2label"},
      {"id2label value a number", "dit-tiny", set_key(MI, "id2label/3", "3"), DIT, mi + "|id2label"},
      {"id2label past the classes", "dit-tiny", set_key(MI, "id2label/10", "\"zebra\""),
       "dit-gen -m {M} -p zebra --steps 2 -o {O}/x.png", "zebra"},
      {"pipeline class unknown", "dit-tiny", set_key(MI, "_class_name", "\"StableDiffusionPipeline\""), DIT, mi},
      {"PixArt caption_channels 0", "pixart-tiny", set_key(TC, "caption_channels", "0"), PIX, tc + "|caption_channels"},
      {"PixArt norm_eps Infinity", "pixart-tiny", set_key(TC, "norm_eps", "Infinity"), PIX, tc + "|norm_eps"},
      {"PixArt norm_eps NaN", "pixart-tiny", set_key(TC, "norm_eps", "NaN"), PIX, tc + "|norm_eps"},
      {"PixArt cross_attention_dim 31", "pixart-tiny", set_key(TC, "cross_attention_dim", "31"), PIX, "cross_attention_dim"},
      {"PixArt interpolation_scale 0", "pixart-tiny", set_key(TC, "interpolation_scale", "0"), PIX, tc},
      {"T5 d_model -1", "pixart-tiny", set_key(EC, "d_model", "-1"), PIX, ec + "|d_model"},
      {"T5 heads 0", "pixart-tiny", set_key(EC, "num_heads", "0"), PIX, ec + "|num_heads"},
      {"T5 layers 1e6", "pixart-tiny", set_key(EC, "num_layers", "1000000"), PIX, "num_layers"},
      {"T5 vocab smaller than the tokenizer", "pixart-tiny", set_key(EC, "vocab_size", "10"), PIX, "vocab_size"},
      {"T5 pad id 5", "pixart-tiny", set_key(EC, "pad_token_id", "5"), PIX, ec + "|pad_token_id"},
      {"T5 buckets 0", "pixart-tiny", set_key(EC, "relative_attention_num_buckets", "0"), PIX,
       ec + "|relative_attention_num_buckets"},
      {"T5 feed_forward_proj unknown", "pixart-tiny", set_key(EC, "feed_forward_proj", "\"relu-gated\""), PIX,
       ec + "|feed_forward_proj"},
      {"T5 epsilon NaN", "pixart-tiny", set_key(EC, "layer_norm_epsilon", "NaN"), PIX, ec + "|layer_norm_epsilon"},
      {"T5 d_kv a string", "pixart-tiny", set_key(EC, "d_kv", "\"8\""), PIX, ec + "|d_kv"},
      {"T5 config missing", "pixart-tiny", remove(EC), PIX, ec},
      {"PixArt scheduler solver_order 5", "pixart-tiny", set_key(SC, "solver_order", "5"), PIX, sc + "|solver_order"},
      {"PixArt lambda_min_clipped NaN", "pixart-tiny", set_key(SC, "lambda_min_clipped", "NaN"), PIX, sc},
  };
}

inline std::vector<Case> tokenizer_cases() {
  using namespace files;
  return {
      {"spiece.model missing", "pixart-tiny", remove(SP), PIX, "spiece.model"},
      {"spiece.model empty", "pixart-tiny", put(SP, ""), PIX, "spiece.model"},
      {"spiece.model garbage", "pixart-tiny", put(SP, "this is not a protobuf \xff\xfe"), PIX, "spiece.model"},
      {"spiece.model cut", "pixart-tiny", truncate(SP, 1000), PIX, "spiece.model"},
      {"spiece.model a directory", "pixart-tiny", make_dir(SP), PIX, "spiece.model"},
      {"spiece.model a FIFO", "pixart-tiny", make_fifo(SP), PIX, "spiece.model"},
      {"tokenizer directory missing", "pixart-tiny", remove("m/tokenizer"), PIX, "tokenizer"},
      {"tokenizer_config not JSON", "pixart-tiny", put(TK, "{\"extra_ids\": "), PIX, "tokenizer_config.json"},
      {"extra_ids -1", "pixart-tiny", set_key(TK, "extra_ids", "-1"), PIX, "tokenizer_config.json|extra_ids"},
      {"extra_ids a string", "pixart-tiny", set_key(TK, "extra_ids", "\"100\""), PIX, "tokenizer_config.json|extra_ids"},
      {"extra_ids 1e9", "pixart-tiny", set_key(TK, "extra_ids", "1000000000"), PIX, "tokenizer_config.json|extra_ids"},
      {"eos_token a number", "pixart-tiny", set_key(TK, "eos_token", "5"), PIX, "tokenizer_config.json|eos_token"},
      {"eos_token <unk>", "pixart-tiny", set_key(TK, "eos_token", "\"<unk>\""), PIX, "tokenizer_config.json|eos"},
      {"pad_token </s>", "pixart-tiny", set_key(TK, "pad_token", "\"</s>\""), PIX, "tokenizer_config.json|pad"},
      {"pad_token content a number", "pixart-tiny", set_key(TK, "pad_token", "{\"content\": 3}"), PIX,
       "tokenizer_config.json|content"},
      {"unk_token a list", "pixart-tiny", set_key(TK, "unk_token", "[]"), PIX, "tokenizer_config.json|unk_token"},
      {"dit-encode: spiece.model garbage", "pixart-tiny", put(SP, "garbage"), ENC, "spiece.model"},
      {"dit-encode: extra_ids -1", "pixart-tiny", set_key(TK, "extra_ids", "-1"), ENC, "extra_ids"},
  };
}

}  // namespace dit_test::hostile
