#!/usr/bin/env python3
"""Expected values for tests/samplers: timesteps, sigmas and short sampling trajectories of
diffusers' DDIMScheduler, DPMSolverMultistepScheduler and EulerDiscreteScheduler.

Independent of the C++ code: the scheduler formulas are re-implemented here with torch and
numpy exactly as diffusers writes them (docs/samplers.md; diffusers is not installed), and the
default DDIM / DPM-Solver++ 2M cases are cross-checked against the classes in
/work/shared/reference/dit_reference.py (the source of the golden data).

  /usr/bin/python3 tests/data/samplers/gen_expected.py > tests/data/samplers/expected.json
"""
import json
import math
import sys

import numpy as np
import torch

torch.set_num_threads(1)
sys.path.insert(0, "/work/shared/reference")
try:
    import dit_reference as ref
except ImportError:  # the cross-check is skipped without the reference
    ref = None

T = 1000


def betas_of(c):
    if c.get("trained_betas") is not None:
        return torch.tensor(c["trained_betas"], dtype=torch.float32)
    s = c.get("beta_schedule", "linear")
    if s == "linear":
        return torch.linspace(c.get("beta_start", 1e-4), c.get("beta_end", 0.02), T, dtype=torch.float32)
    if s == "scaled_linear":
        return torch.linspace(c["beta_start"] ** 0.5, c["beta_end"] ** 0.5, T, dtype=torch.float32) ** 2
    if s == "squaredcos_cap_v2":
        def ab(t):
            return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
        return torch.tensor([min(1 - ab((i + 1) / T) / ab(i / T), 0.999) for i in range(T)], dtype=torch.float32)
    raise ValueError(s)


def acp(c):
    return torch.cumprod(1.0 - betas_of(c), dim=0)


# ----------------------------------------------------------------------------- DDIM
class DDIM:
    def __init__(self, c, n):
        self.c = c
        self.ac = acp(c)
        self.final = torch.tensor(1.0) if c.get("set_alpha_to_one", True) else self.ac[0]
        sp = c.get("timestep_spacing", "leading")
        if sp == "linspace":
            ts = np.linspace(0, T - 1, n).round()[::-1].copy().astype(np.int64)
        elif sp == "leading":
            r = T // n
            ts = (np.arange(0, n) * r).round()[::-1].copy().astype(np.int64) + c.get("steps_offset", 0)
        else:
            ts = np.round(np.arange(T, 0, -T / n)).astype(np.int64) - 1
        self.n = n
        self.timesteps = [int(t) for t in ts]
        self.sigmas = []
        self.init_noise_sigma = 1.0

    def scale(self, x, i):
        return x

    def step(self, i, eps, x):
        t = self.timesteps[i]
        tp = t - T // self.n
        a_t = self.ac[t]
        a_p = self.ac[tp] if tp >= 0 else self.final
        b_t = 1 - a_t
        pt = self.c.get("prediction_type", "epsilon")
        if pt == "epsilon":
            x0 = (x - b_t ** (0.5) * eps) / a_t ** (0.5)
            pe = eps
        elif pt == "sample":
            x0 = eps
            pe = (x - a_t ** (0.5) * x0) / b_t ** (0.5)
        else:
            x0 = (a_t ** 0.5) * x - (b_t ** 0.5) * eps
            pe = (a_t ** 0.5) * eps + (b_t ** 0.5) * x
        if self.c.get("clip_sample", True):
            r = self.c.get("clip_sample_range", 1.0)
            x0 = x0.clamp(-r, r)
        std = 0.0 * torch.tensor(0.5, dtype=torch.float32)
        d = (1 - a_p - std ** 2) ** (0.5) * pe
        return a_p ** (0.5) * x0 + d


# ----------------------------------------------------------------------------- DPM-Solver++
class DPM:
    def __init__(self, c, n):
        self.c = c
        ac32 = acp(c)
        lmc = c.get("lambda_min_clipped", -float("inf"))
        lam = torch.log(torch.sqrt(ac32)) - torch.log(torch.sqrt(1 - ac32))
        clipped = int(torch.searchsorted(torch.flip(lam, [0]), torch.tensor(lmc, dtype=torch.float32)))
        last = T - clipped
        sp = c.get("timestep_spacing", "linspace")
        if sp == "linspace":
            ts = np.linspace(0, last - 1, n + 1).round()[::-1][:-1].copy().astype(np.int64)
        elif sp == "leading":
            r = last // (n + 1)
            ts = (np.arange(0, n + 1) * r).round()[::-1][:-1].copy().astype(np.int64) + c.get("steps_offset", 0)
        else:
            ts = np.arange(last, 0, -T / n).round().copy().astype(np.int64) - 1
        # as dit_reference.py: the sigma table in float64 from the float32 alphas_cumprod
        ac = ac32.numpy().astype(np.float64)
        sig = ((1 - ac) / ac) ** 0.5
        s = np.interp(ts, np.arange(len(sig)), sig)
        if c.get("final_sigmas_type", "zero") == "sigma_min":
            last_sigma = float(((1 - ac32[0]) / ac32[0]) ** 0.5)
        else:
            last_sigma = 0.0
        self.sigmas_t = torch.from_numpy(np.concatenate([s, [last_sigma]]).astype(np.float32))
        self.sigmas = [float(v) for v in self.sigmas_t]
        self.timesteps = [int(t) for t in ts]
        self.init_noise_sigma = 1.0
        self.outs = [None, None]
        self.lower = 0

    def scale(self, x, i):
        return x

    def _as(self, sigma):
        a = 1 / ((sigma ** 2 + 1) ** 0.5)
        return a, sigma * a

    def step(self, i, eps, x):
        c = self.c
        n = len(self.timesteps)
        lof = (i == n - 1) and (c.get("euler_at_final", False) or (c.get("lower_order_final", True) and n < 15)
                                or c.get("final_sigmas_type", "zero") == "zero")
        a_s, s_s = self._as(self.sigmas_t[i])
        pt = c.get("prediction_type", "epsilon")
        if pt == "epsilon":
            x0 = (x - s_s * eps) / a_s
        elif pt == "v_prediction":
            x0 = a_s * x - s_s * eps
        else:
            x0 = eps
        self.outs = [self.outs[1], x0]
        a_t, s_t = self._as(self.sigmas_t[i + 1])
        lam_t = torch.log(a_t) - torch.log(s_t)
        lam_s = torch.log(a_s) - torch.log(s_s)
        h = lam_t - lam_s
        if c.get("solver_order", 2) == 1 or self.lower < 1 or lof:
            out = (s_t / s_s) * x - (a_t * (torch.exp(-h) - 1.0)) * x0
        else:
            a_p, s_p = self._as(self.sigmas_t[i - 1])
            lam_p = torch.log(a_p) - torch.log(s_p)
            m0, m1 = self.outs[1], self.outs[0]
            h0 = lam_s - lam_p
            r0 = h0 / h
            D0, D1 = m0, (1.0 / r0) * (m0 - m1)
            if c.get("solver_type", "midpoint") == "midpoint":
                out = (s_t / s_s) * x - (a_t * (torch.exp(-h) - 1.0)) * D0 - 0.5 * (a_t * (torch.exp(-h) - 1.0)) * D1
            else:
                out = ((s_t / s_s) * x - (a_t * (torch.exp(-h) - 1.0)) * D0
                       + (a_t * ((torch.exp(-h) - 1.0) / h + 1.0)) * D1)
        if self.lower < c.get("solver_order", 2):
            self.lower += 1
        return out


# ----------------------------------------------------------------------------- Euler
class Euler:
    def __init__(self, c, n):
        self.c = c
        ac = acp(c)
        sp = c.get("timestep_spacing", "linspace")
        if sp == "linspace":
            ts = np.linspace(0, T - 1, n, dtype=np.float32)[::-1].copy()
        elif sp == "leading":
            r = T // n
            ts = (np.arange(0, n) * r).round()[::-1].copy().astype(np.float32)
            ts += c.get("steps_offset", 0)
        else:
            ts = (np.arange(T, 0, -T / n)).round().copy().astype(np.float32)
            ts -= 1
        sig = np.array(((1 - ac) / ac) ** 0.5)
        s = np.interp(ts, np.arange(0, len(sig)), sig)
        if c.get("final_sigmas_type", "zero") == "sigma_min":
            sl = ((1 - ac[0]) / ac[0]) ** 0.5
        else:
            sl = 0
        self.sigmas_t = torch.from_numpy(np.concatenate([s, [sl]]).astype(np.float32)).to(dtype=torch.float32)
        self.sigmas = [float(v) for v in self.sigmas_t]
        self.timesteps = [float(t) for t in torch.from_numpy(ts.astype(np.float32))]
        mx = self.sigmas_t.max()
        self.init_noise_sigma = float(mx if sp in ["linspace", "trailing"] else (mx ** 2 + 1) ** 0.5)

    def scale(self, x, i):
        sigma = self.sigmas_t[i]
        return x / ((sigma ** 2 + 1) ** 0.5)

    def step(self, i, eps, x):
        sigma = self.sigmas_t[i]
        gamma = 0.0
        sigma_hat = sigma * (gamma + 1)
        pt = self.c.get("prediction_type", "epsilon")
        if pt == "epsilon":
            x0 = x - sigma_hat * eps
        elif pt == "v_prediction":
            x0 = eps * (-sigma / (sigma ** 2 + 1) ** 0.5) + (x / (sigma ** 2 + 1))
        else:
            x0 = eps
        d = (x - x0) / sigma_hat
        dt = self.sigmas_t[i + 1] - sigma_hat
        return x + d * dt


CLASSES = {"ddim": DDIM, "dpm": DPM, "euler": Euler}
NELEM = 32


def model(x, i):
    # synthetic deterministic "model": eps_j = 0.1*x_j + 0.05*sin(i + 0.1*j), in float32
    c = torch.tensor([0.05 * math.sin(i + 0.1 * j) for j in range(NELEM)], dtype=torch.float32)
    return x * torch.tensor(0.1, dtype=torch.float32) + c


def run(kind, cfg, n, x_init):
    s = CLASSES[kind](cfg, n)
    x = x_init.clone() * torch.tensor(s.init_noise_sigma, dtype=torch.float32)
    for i in range(len(s.timesteps)):
        eps = model(s.scale(x, i), i)
        x = s.step(i, eps, x)
    return s, x


def f32list(t):
    return [float(v) for v in t]


def main():
    dit_cfg = {"beta_end": 0.02, "beta_schedule": "linear", "beta_start": 0.0001, "clip_sample": False,
               "num_train_timesteps": 1000, "prediction_type": "epsilon", "set_alpha_to_one": True,
               "steps_offset": 0, "trained_betas": None}
    out = {"alphas_cumprod": {
        "linear": f32list(acp({"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02})),
        "scaled_linear": f32list(acp({"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012})),
        "squaredcos_cap_v2": f32list(acp({"beta_schedule": "squaredcos_cap_v2"})),
    }}
    sched = []
    for kind in ["ddim", "dpm", "euler"]:
        for sp in ["leading", "linspace", "trailing"]:
            for n in [4, 20, 50]:
                s = CLASSES[kind]({"timestep_spacing": sp}, n)
                sched.append({"kind": kind, "timestep_spacing": sp, "n": n, "timesteps": s.timesteps,
                              "sigmas": s.sigmas, "init_noise_sigma": s.init_noise_sigma})
    # PixArt-style lambda_min_clipped (finite, e.g. SD-style -5.1) and steps_offset 1
    for kind, cfg, n in [("dpm", {"lambda_min_clipped": -5.1}, 20), ("dpm", {"timestep_spacing": "leading",
                                                                              "steps_offset": 1}, 20),
                         ("ddim", {"steps_offset": 1}, 50), ("euler", {"timestep_spacing": "leading",
                                                                        "steps_offset": 1}, 20),
                         ("dpm", {"final_sigmas_type": "sigma_min"}, 10),
                         ("euler", {"final_sigmas_type": "sigma_min"}, 10),
                         ("dpm", {"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012}, 25),
                         ("euler", {"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012}, 30),
                         ("ddim", {"timestep_spacing": "trailing"}, 7), ("dpm", {"timestep_spacing": "trailing"}, 7),
                         ("euler", {"timestep_spacing": "trailing"}, 80), ("ddim", {"timestep_spacing": "linspace"}, 7)]:
        s = CLASSES[kind](cfg, n)
        e = {"kind": kind, "config": cfg, "n": n, "timesteps": s.timesteps, "sigmas": s.sigmas,
             "init_noise_sigma": s.init_noise_sigma}
        e.update({"timestep_spacing": cfg.get("timestep_spacing", "")})
        sched.append(e)
    out["schedules"] = sched

    x_init = torch.randn(NELEM, generator=torch.Generator().manual_seed(0), dtype=torch.float32)
    out["x_init"] = f32list(x_init)
    trajs = []
    cases = [
        ("ddim", dit_cfg, 10),
        ("ddim", {}, 10),  # class defaults: clip_sample true, leading
        ("ddim", dict(dit_cfg, prediction_type="v_prediction", timestep_spacing="trailing"), 10),
        ("ddim", dict(dit_cfg, prediction_type="sample", timestep_spacing="linspace", set_alpha_to_one=False), 10),
        ("dpm", dit_cfg, 20),
        ("dpm", dit_cfg, 10),
        ("dpm", dict(dit_cfg, solver_type="heun"), 20),
        ("dpm", dict(dit_cfg, prediction_type="v_prediction", timestep_spacing="trailing"), 12),
        ("dpm", dict(dit_cfg, solver_order=1), 8),
        ("dpm", dict(dit_cfg, final_sigmas_type="sigma_min"), 20),
        ("euler", dit_cfg, 10),
        ("euler", dict(dit_cfg, timestep_spacing="leading"), 10),
        ("euler", dict(dit_cfg, prediction_type="v_prediction", timestep_spacing="trailing"), 10),
    ]
    for kind, cfg, n in cases:
        s, x = run(kind, cfg, n, x_init)
        trajs.append({"kind": kind, "config": {k: v for k, v in cfg.items() if v is not None}, "n": n,
                      "final": f32list(x)})
    out["trajectories"] = trajs

    # cross-check the re-implementation against dit_reference.py where it has the class
    if ref is not None:
        for kind, refcls, n in [("ddim", ref.DDIM, 10), ("dpm", ref.DPMpp2M, 20), ("dpm", ref.DPMpp2M, 10)]:
            r = refcls(dit_cfg, n)
            x = x_init.clone()
            for i in range(len(r.timesteps)):
                x = r.step(i, model(x, i), x)
            mine = run(kind, dit_cfg, n, x_init)[1]
            assert torch.equal(x, mine), (kind, n, (x - mine).abs().max())
            assert r.timesteps == CLASSES[kind](dit_cfg, n).timesteps
    json.dump(out, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
