"""Why the bf16 Winograd convolution (runtime/conv2d_winograd_bf16.h) uses F(2x2, 3x3): the
rounding error of F(m x m, 3x3) tiles with bf16 transforms, against the direct bf16 kernel's.

    /usr/bin/python3 tools/winograd_bf16_error.py [--channels 256] [--tiles 400] [--seed 0]

Needs numpy (Debian: python3-numpy); the build and the tests do not use it.

For each tile size m it builds the Cook-Toom matrices Aᵀ, G, Bᵀ for the points given (and
infinity), checks that they compute the 3x3 correlation exactly, then for random inputs
d ~ N(0, 1) and weights g ~ N(0, 1/(9C)):
  - exact:    the correlation in float64;
  - direct:   x and w rounded to bf16, products summed exactly (the direct bf16 kernel);
  - Winograd: U = G g Gᵀ and V = Bᵀ d B rounded to bf16 (as dit-gen does), the products summed
              over the channels and rounded to f32, y = Aᵀ M A.
It prints each form's RMS error against exact, and the ratio to the direct kernel's. The
tests bound dit-gen's F(2x2, 3x3) at 2.5x the direct kernel's error
(tests/runtime/test_conv2d_winograd_bf16.cpp); the thirty-fourth session's run gave 1.70x for
F(2x2, 3x3), 5.9x for F(3x3, 3x3) and 10.6x for F(4x4, 3x3) (docs/benchmarks.md).
"""
import argparse
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("tools/winograd_bf16_error.py: needs numpy (apt-get install python3-numpy)")


def bf16(a):
    """a rounded to the nearest bf16 (ties to even), as float64."""
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def cook_toom(m, r, points):
    """Aᵀ [m, n], G [n, r], Bᵀ [n, n] of F(m, r) on the points and infinity (n = m + r - 1)."""
    n = m + r - 1
    assert len(points) == n - 1
    at, g = np.zeros((m, n)), np.zeros((n, r))
    for j, a in enumerate(points):
        at[:, j] = [a**i for i in range(m)]
        f = np.prod([a - b for b in points if b != a])
        g[j] = [a**k / f for k in range(r)]
    at[m - 1, n - 1] = 1
    g[n - 1, r - 1] = 1
    # Bᵀ from y_i = sum_k g_k d_(i+k): sum_j Aᵀ[i, j] G[j, k] Bᵀ[j, l] = [l == i + k].
    eq, rhs = [], []
    for i in range(m):
        for k in range(r):
            for l in range(n):
                row = np.zeros((n, n))
                row[:, l] = at[i, :] * g[:, k]
                eq.append(row.ravel())
                rhs.append(1.0 if l == i + k else 0.0)
    eq, rhs = np.array(eq), np.array(rhs)
    sol = np.linalg.lstsq(eq, rhs, rcond=None)[0]
    if np.abs(eq @ sol - rhs).max() > 1e-9:
        raise ValueError(f"F({m}, {r}) on {points}: no Bᵀ computes the correlation")
    return at, g, sol.reshape(n, n)


def errors(m, points, channels, tiles, outputs, rng):
    at, g_mat, bt = cook_toom(m, 3, points)
    n = m + 2
    d = rng.standard_normal((tiles, channels, n, n))
    g = rng.standard_normal((outputs, channels, 3, 3)) / np.sqrt(9 * channels)
    exact = np.zeros((tiles, outputs, m, m))
    direct = np.zeros_like(exact)
    db, gb = bf16(d), bf16(g)
    for a in range(m):
        for b in range(m):
            exact[:, :, a, b] = np.einsum("tcij,ocij->to", d[:, :, a : a + 3, b : b + 3], g)
            direct[:, :, a, b] = np.einsum("tcij,ocij->to", db[:, :, a : a + 3, b : b + 3], gb)
    u = bf16(np.einsum("ik,ockl,jl->ocij", g_mat, g, g_mat))
    v = bf16(np.einsum("ik,tckl,jl->tcij", bt, d, bt))
    prod = np.einsum("tcij,ocij->toij", v, u).astype(np.float32).astype(np.float64)
    y = np.einsum("ik,tokl,jl->toij", at, prod, at)
    rms = lambda e: float(np.sqrt(np.mean(e**2)))
    return rms(y - exact), rms(direct - exact), n * n / (m * m)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--channels", type=int, default=256, help="input channels summed (default 256)")
    ap.add_argument("--tiles", type=int, default=400, help="random tiles (default 400)")
    ap.add_argument("--outputs", type=int, default=16, help="output channels (default 16)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if min(args.channels, args.tiles, args.outputs) < 1:
        sys.exit("tools/winograd_bf16_error.py: --channels, --tiles and --outputs must be at least 1")
    rng = np.random.default_rng(args.seed)
    forms = [("F(2x2, 3x3)", 2, [0, 1, -1]), ("F(3x3, 3x3)", 3, [0, 1, -1, 2]),
             ("F(3x3, 3x3), 1/2", 3, [0, 1, -1, 0.5]), ("F(4x4, 3x3)", 4, [0, 1, -1, 2, -2]),
             ("F(4x4, 3x3), 1/2", 4, [0, 1, -1, 0.5, -0.5])]
    print(f"{'form':18} {'products/output':>15} {'RMS error':>10} {'direct bf16':>12} {'ratio':>6}")
    for name, m, points in forms:
        w, d, per = errors(m, points, args.channels, args.tiles, args.outputs, rng)
        print(f"{name:18} {per:15.2f} {w:10.2e} {d:12.2e} {w / d:6.2f}")


if __name__ == "__main__":
    main()
