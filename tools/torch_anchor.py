"""PyTorch CPU anchor for dit-bench: one DiT denoising forward (batch 2 = CFG) in diffusers
semantics, on the weights dit-make-model / dit-bench wrote, timed the same way (median of the
runs after one untimed call). Prints one JSON line per (dtype, size).

  python3 tools/torch_anchor.py MODEL_DIR SIZES DTYPES [RUNS] [eager|compile] [THREADS]
  e.g.    python3 tools/torch_anchor.py ~/.cache/dit-gen/bench/xl-L2 512,1024 f32 3 eager 2

The project's copy of ../shared/bench/torch_anchor.py that also runs on older PyTorch (Debian
12's 1.13): attention is F.scaled_dot_product_attention where it exists (PyTorch >= 2.0), else
softmax(Q·Kᵀ/√d)·V written out (the JSON's "attention" says which), and the safetensors files
are read with the standard library when the safetensors package is missing. `compile` wraps
the forward in torch.compile (PyTorch >= 2.0; its first, compiling call is not timed).
Not part of the build or the tests: a benchmark to quote ratios from, on one machine."""
import json, math, os, struct, sys, time, statistics

import numpy as np
import torch
import torch.nn.functional as F

d = sys.argv[1]
sizes = [int(s) for s in sys.argv[2].split(",")]
dtypes = sys.argv[3].split(",")
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
mode = sys.argv[5] if len(sys.argv) > 5 else "eager"
if len(sys.argv) > 6:
    torch.set_num_threads(int(sys.argv[6]))
cfg = json.load(open(os.path.join(d, "transformer", "config.json")))
tdir = os.path.join(d, "transformer")
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def read_safetensors(path):
    """name -> tensor, F32 and BF16 only (what dit-make-model writes)."""
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        if info["dtype"] == "F32":
            t = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.float32).copy())
        elif info["dtype"] == "BF16":
            t = torch.from_numpy(np.frombuffer(data[b:e], dtype=np.int16).copy()).view(torch.bfloat16)
        else:
            raise SystemExit(f"{path}: {name}: dtype {info['dtype']} not handled")
        out[name] = t.reshape(info["shape"])
    return out


w = {}
for fn in sorted(os.listdir(tdir)):
    if fn.endswith(".safetensors"):
        w.update(read_safetensors(os.path.join(tdir, fn)))


def sincos_1d(dim, pos):
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
    out = torch.outer(pos.reshape(-1).double(), omega)
    return torch.cat([torch.sin(out), torch.cos(out)], dim=1)


def pos_embed_2d(D, gh, gw, base):
    gy = torch.arange(gh, dtype=torch.float32) / (gh / base)
    gx = torch.arange(gw, dtype=torch.float32) / (gw / base)
    ww, hh = torch.meshgrid(gx, gy, indexing="xy")
    return torch.cat([sincos_1d(D // 2, ww), sincos_1d(D // 2, hh)], dim=1).float()


def temb(t, dim=256):
    half = dim // 2
    e = t[:, None].float() * torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)[None]
    e = torch.cat([torch.sin(e), torch.cos(e)], -1)
    return torch.cat([e[:, half:], e[:, :half]], -1)


def lin(x, W, n):
    return F.linear(x, W[n + ".weight"], W[n + ".bias"])


def attention(q, k, v):  # [B, H, N, d]
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v)
    s = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    return torch.matmul(torch.softmax(s, dim=-1), v)


def forward(W, x, t, y, dt):
    B, _, H, Wd = x.shape
    p, heads, hd = cfg["patch_size"], cfg["num_attention_heads"], cfg["attention_head_dim"]
    D = heads * hd
    gh, gw = H // p, Wd // p
    h = F.conv2d(x, W["pos_embed.proj.weight"], W["pos_embed.proj.bias"], stride=p).flatten(2).transpose(1, 2)
    h = h + pos_embed_2d(D, gh, gw, cfg["sample_size"] // p)[None].to(dt)
    te = temb(t).to(dt)
    for i in range(cfg["num_layers"]):
        b = f"transformer_blocks.{i}."
        c = lin(F.silu(lin(te, W, b + "norm1.emb.timestep_embedder.linear_1")), W,
                b + "norm1.emb.timestep_embedder.linear_2")
        c = c + W[b + "norm1.emb.class_embedder.embedding_table.weight"][y]
        m = lin(F.silu(c), W, b + "norm1.linear")
        sh1, sc1, g1, sh2, sc2, g2 = m.chunk(6, dim=1)
        n = F.layer_norm(h, (D,), eps=1e-6) * (1 + sc1[:, None]) + sh1[:, None]
        q = lin(n, W, b + "attn1.to_q").view(B, -1, heads, hd).transpose(1, 2)
        k = lin(n, W, b + "attn1.to_k").view(B, -1, heads, hd).transpose(1, 2)
        v = lin(n, W, b + "attn1.to_v").view(B, -1, heads, hd).transpose(1, 2)
        a = attention(q, k, v)
        h = h + g1[:, None] * lin(a.transpose(1, 2).reshape(B, -1, D), W, b + "attn1.to_out.0")
        n = F.layer_norm(h, (D,), eps=1e-6) * (1 + sc2[:, None]) + sh2[:, None]
        h = h + g2[:, None] * lin(F.gelu(lin(n, W, b + "ff.net.0.proj"), approximate="tanh"), W, b + "ff.net.2")
    return h


if mode == "compile" and not hasattr(torch, "compile"):
    raise SystemExit(f"torch_anchor: torch {torch.__version__} has no torch.compile (PyTorch >= 2.0)")
step = torch.compile(forward, dynamic=False) if mode == "compile" else forward
torch.manual_seed(0)
for dtn in dtypes:
    dt = torch.bfloat16 if dtn == "bf16" else torch.float32
    W = {k: v.to(dt) for k, v in w.items()}
    for size in sizes:
        lat = size // 8
        x = torch.randn(2, cfg["in_channels"], lat, lat).to(dt)
        t = torch.tensor([500, 500])
        y = torch.tensor([207, 1000])
        times = []
        with torch.inference_mode():
            for r in range(runs + 1):
                t0 = time.perf_counter()
                step(W, x, t, y, dt)
                t1 = time.perf_counter()
                if r:
                    times.append(t1 - t0)
        print(json.dumps({"anchor": f"torch-{mode}", "attention": "sdpa" if HAS_SDPA else "matmul-softmax-matmul",
                          "torch": torch.__version__, "threads": torch.get_num_threads(), "layers": cfg["num_layers"],
                          "size": size, "tokens": (lat // 2) ** 2, "dtype": dtn,
                          "step_s": statistics.median(times), "all": times}), flush=True)
