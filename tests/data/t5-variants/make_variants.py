#!/usr/bin/env python3
"""T5 text encoder variants and their goldens, made with the independent reference.

Run from the repository root with Debian's python3 (torch, numpy, sentencepiece):
  /usr/bin/python3 tests/data/t5-variants/make_variants.py /work/shared/reference

The weights are pixart-tiny's text encoder (tests/data/pixart-tiny/text_encoder, F32), stored
differently; the hidden states come from the reference's t5_encode (pixart_reference.py) on
the weights as a float32 T5EncoderModel would hold them, and the ids from its T5TokenizerRef
on pixart-tiny's tokenizer after its preprocess (lower/strip):
  single-f32/text_encoder: one model.safetensors (no index), F32, shared.weight
  f16-embed/text_encoder:  two F16 shards + index, the embedding stored only as
                           encoder.embed_tokens.weight (no shared.weight)
Goldens (../golden/t5-variants/): input_ids, attention_mask [B, L] I64, hidden_states
[B, L, 48] F32; metadata: prompts, preprocessed, max_length.
"""
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, sys.argv[1])
import pixart_reference as ref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.dirname(HERE)
SRC = os.path.join(DATA, "pixart-tiny")
LONG = ("a very long prompt about a red fox walking through the deep snow of a quiet forest at dawn, with soft "
        "light, mist, tall pine trees, 4k, highly detailed, cinematic")


def encode_golden(weights, cfg, prompts, L, out):
    tok = ref.T5TokenizerRef(os.path.join(SRC, "tokenizer"))
    pre = [ref.preprocess(p) for p in prompts]
    rows = [tok(t, L) for t in pre]
    ids = torch.stack([r[0] for r in rows])
    mask = torch.stack([r[1] for r in rows])
    w = {k: v.to(torch.float32) for k, v in weights.items()}  # F16 widens exactly
    hidden = ref.t5_encode(w, cfg, ids, mask)
    ref.st_write_typed(out, {"input_ids": ids, "attention_mask": mask, "hidden_states": hidden},
                       {"prompts": json.dumps(prompts, ensure_ascii=False),
                        "preprocessed": json.dumps(pre, ensure_ascii=False), "max_length": str(L)})


def main():
    cfg_path = os.path.join(SRC, "text_encoder", "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    w = {}
    for shard in sorted(os.listdir(os.path.join(SRC, "text_encoder"))):
        if shard.endswith(".safetensors"):
            w.update(ref.st_read_typed(os.path.join(SRC, "text_encoder", shard))[0])
    gold = os.path.join(DATA, "golden", "t5-variants")
    os.makedirs(gold, exist_ok=True)

    d = os.path.join(HERE, "single-f32", "text_encoder")
    os.makedirs(d, exist_ok=True)
    shutil.copy(cfg_path, d)
    ref.write_sharded_typed(d, "model", w, 1, torch.float32)
    encode_golden(w, cfg, [" ".join([LONG] * 3), "A Red Fox in the SNOW"], 300,
                  os.path.join(gold, "single-f32.encode.L300.safetensors"))

    d = os.path.join(HERE, "f16-embed", "text_encoder")
    os.makedirs(d, exist_ok=True)
    shutil.copy(cfg_path, d)
    w16 = {("encoder.embed_tokens.weight" if k == "shared.weight" else k): v.to(torch.float16) for k, v in w.items()}
    ref.write_sharded_typed(d, "model", w16, 2, torch.float16)
    encode_golden(w16, cfg, [LONG, "   A Red FOX in the Snow!  ", ""], 16,
                  os.path.join(gold, "f16-embed.encode.L16.safetensors"))


if __name__ == "__main__":
    main()
