#!/usr/bin/env python3
"""Derives tests/data/dit-tiny-own-embedders from tests/data/dit-tiny: the same checkpoint,
except that block 1's timestep MLP and class table (transformer_blocks.1.norm1.emb.*) are
their own (block 0's plus seeded noise) instead of the converter's copies of block 0's. A
model that used block 0's embedder for every block, or block 1's for the final layer,
no longer matches the reference. Golden data: dit_reference.py generate on the result.

  python3 tests/data/derive_own_embedders.py ../shared/reference tests/data
"""
import os
import shutil
import sys

ref, data = sys.argv[1], sys.argv[2]
sys.path.insert(0, ref)
import torch  # noqa: E402
from dit_reference import st_read_file, st_write  # noqa: E402

src, dst = os.path.join(data, "dit-tiny"), os.path.join(data, "dit-tiny-own-embedders")
os.makedirs(os.path.join(dst, "transformer"), exist_ok=True)
shutil.copytree(os.path.join(src, "scheduler"), os.path.join(dst, "scheduler"), dirs_exist_ok=True)
shutil.copy(os.path.join(src, "model_index.json"), dst)
shutil.copy(os.path.join(src, "transformer", "config.json"), os.path.join(dst, "transformer"))
if not os.path.lexists(os.path.join(dst, "vae")):
    os.symlink("../dit-tiny/vae", os.path.join(dst, "vae"))
t = st_read_file(os.path.join(src, "transformer", "diffusion_pytorch_model.safetensors"))
g = torch.Generator().manual_seed(2026)
for name in sorted(t):
    if name.startswith("transformer_blocks.1.norm1.emb."):
        v = t[name]
        t[name] = v + 0.5 * v.std() * torch.randn(v.shape, generator=g)
st_write(os.path.join(dst, "transformer", "diffusion_pytorch_model.safetensors"), t)
