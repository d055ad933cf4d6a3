"""The ratios tools/scaling_bench.sh measured, as text tables (the README's benchmark section
quotes them): python3 tools/scaling_summary.py OUT_DIR

- Layouts: each layout's step against the same invocation's serial-all (one process with all
  cores) — the median over rounds of dit-bench's speedup_vs_serial_all — and rank 0's share of
  the step spent communicating and waiting.
- One-thread ranks: the same share (the issue's target: at most 10% with 8 ranks).
- Kernels: attention's GFLOP/s against the same run's GEMM, f32 and bf16.
- PyTorch: its step against dit-gen's serial-all step of the nearest invocation, per dtype and size.
- Whole runs: wall times, bf16 against f32 and --cfg-parallel against one thread per round.
- Simulated machines: each layout's step against one node's.
- Whole dit-gen steps (tools/step_table.sh): each layout's step, and one process's over it.
"""
import json
import os
import statistics
import sys


def load(path):
    if not os.path.exists(path):
        return []
    docs = []
    for line in open(path):
        line = line.strip()
        if line:
            try:
                docs.append(json.loads(line))
            except ValueError:
                pass
    return docs


def share(run):
    b = run.get("breakdown_s_rank0") or {}
    step = run.get("step_s") or 0
    return (b.get("communication", 0) + b.get("waiting", 0)) / step if step else float("nan")


def layouts(docs):
    rows = {}
    for doc in docs:
        for run in doc.get("runs", []):
            if run["layout"] in ("serial", "serial-all") or run.get("speedup_vs_serial_all") is None:
                continue
            key = (doc["part"], run["tokens"], run["dtype"], run["layout"], run["ranks"], run["threads_per_rank"])
            rows.setdefault(key, []).append((run["speedup_vs_serial_all"], share(run)))
    print("## One machine: each layout against one process with all cores (same total threads)")
    print("| tokens | dtype | layout | ranks x threads | vs serial-all (median; rounds) | comm+wait share (rank 0) |")
    print("|---|---|---|---|---|---|")
    for (part, tokens, dtype, layout, ranks, threads), v in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][4], kv[0][3])):
        sp = [x[0] for x in v]
        if part.endswith("-4kb-pages"):  # the shared memory on 4 KB pages (DIT_NO_SHM_HUGE_PAGES=1)
            layout += " (shm on 4 KB pages)"
        print(f"| {tokens} | {dtype} | {layout} | {ranks} x {threads} | {statistics.median(sp):.3f} "
              f"({', '.join(f'{x:.3f}' for x in sp)}) | {100 * statistics.median(x[1] for x in v):.1f}% |")
    print()
    print("## One thread per rank: step, speed-up over one thread, communication + waiting (rank 0)")
    print("| tokens | dtype | rows | round | layout | step (s) | vs serial | comm+wait share |")
    print("|---|---|---|---|---|---|---|---|")
    for doc in docs:
        if doc.get("part") not in ("one-thread-ranks", "one-thread-ranks-unshared"):
            continue
        for run in doc.get("runs", []):
            sp = run.get("speedup_vs_serial")
            mode = run.get("share_rows", run.get("share_ffn"))  # (the nineteenth session's name)
            ffn = "own" if mode == "off" else "shared" if mode else ""
            print(f"| {run['tokens']} | {run['dtype']} | {ffn} | {run.get('round', 0) + 1} | {run['layout']} | "
                  f"{run['step_s']:.3f} | {'' if sp is None else f'{sp:.2f}x'} | {100 * share(run):.1f}% |")
    print()


def kernels(docs):
    print("## Kernels (all cores): GFLOP/s, and attention against the GEMM of the same dtype")
    gemm = {}
    for doc in docs:
        for r in doc.get("results", []):
            if r.get("op") == "matmul_square_prepacked":
                gemm[r["dtype"]] = r["gflops"]
    for dt, g in sorted(gemm.items()):
        print(f"- GEMM 2048^3 {dt}: {g:.0f} GFLOP/s")
    for doc in docs:
        for r in doc.get("results", []):
            if r.get("op", "").startswith("attention") and r.get("dtype") in gemm:
                ph = r.get("phases", {})
                phases = (f"; Q·Kᵀ {ph['qk']:.2f}, softmax {ph['softmax']:.2f}, P·V {ph['pv']:.2f} of its time"
                          if all(k in ph for k in ("qk", "softmax", "pv")) else "")
                how = " (scale in the Q·Kᵀ matmul)" if r["dtype"] == "bf16" and r.get("scale_in") == "qk_matmul" else ""
                if r.get("qk_head_dim", r.get("head_dim")) != r.get("head_dim"):  # --bf16-pad-qk
                    how += f" (Q, K padded to {r['qk_head_dim']})"
                if r.get("form") == "dense":  # --dense: run_dense over planes made once
                    how += " (dense planes)"
                print(f"- {r['op']} {r['dtype']}{how} {r.get('tokens', '')} tokens, head_dim {r.get('head_dim', '?')}: "
                      f"{r['gflops']:.0f} GFLOP/s, {r['gflops'] / gemm[r['dtype']]:.2f} of the GEMM{phases}")
    linear, impl = {}, {}
    for doc in docs:
        for r in doc.get("results", []):
            if r.get("op", "").startswith("linear_"):
                # the gated linears with --gate-after-matmul: the gate in a pass after a plain matmul
                after = " (gate after the matmul)" if r.get("gate") == "after_matmul" else ""
                linear[(r["op"], after, r["dtype"], r["tokens"])] = r["gflops"]
                impl[(r["op"], after, r["dtype"], r["tokens"])] = r.get("impl", "")
    for (op, after, dt, tokens), g in sorted(linear.items()):
        if op.endswith("_packed") or dt not in gemm:
            continue
        packed = linear.get((op + "_packed", after, dt, tokens))
        # the oneDNN implementation (brgemm or gemm:jit, AMX or not) and whether packing was used
        how = impl.get((op + "_packed", after, dt, tokens)) or impl.get((op, after, dt, tokens), "")
        print(f"- {op}{after} {dt} {tokens} tokens: {g:.0f} GFLOP/s, {g / gemm[dt]:.2f} of the GEMM"
              + ("" if packed is None else f"; weights packed {packed:.0f} ({packed / g:.2f}x)")
              + (f" [{how}]" if how else ""))
    conv = {}
    for doc in docs:
        for r in doc.get("results", []):
            if r.get("op") in ("conv3x3_nhwc", "conv3x3_nhwc_winograd"):
                conv[(r["channels"], r["hw"], r["dtype"], r["op"].endswith("winograd"))] = r
    for (ch, hw, dt, wino), r in sorted(conv.items()):
        direct = conv.get((ch, hw, dt, False))
        if not wino or direct is None:
            continue
        # effective GFLOP/s (the direct convolution's FLOPs over the time) and the kernels used
        print(f"- VAE conv 3x3 {ch} channels at {hw}x{hw} {dt}: direct {direct['gflops']:.0f} [{direct.get('impl', '')}], "
              f"Winograd {r['gflops']:.0f} [{r.get('impl', '')}] ({r['gflops'] / direct['gflops']:.2f}x)")
    for doc in docs:
        for r in doc.get("results", []):
            if r.get("op") == "copy":
                print(f"- the collectives' copies ({r.get('mb', 0):.0f} MB strided block): one thread "
                      f"{r['gbps_one_thread']:.1f} GB/s, {r['team_threads']} threads {r['gbps_team']:.1f} GB/s "
                      f"({r['team_vs_one']:.2f}x)")
    print()


def torch_vs(torch_docs, layout_docs):
    print("## PyTorch on the same weights and threads (step seconds; dit-gen = serial-all)")
    ours = {}
    for doc in layout_docs:
        if doc.get("part") != "dit-gen-vs-torch" and not doc.get("part", "").startswith("layouts-4096"):
            continue
        for run in doc.get("runs", []):
            if run["layout"] == "serial-all":
                ours.setdefault((run["tokens"], run["dtype"]), []).append(run["step_s"])
    print("| tokens | dtype | PyTorch | mode | dit-gen | dit-gen faster by |")
    print("|---|---|---|---|---|---|")
    for t in torch_docs:
        if "step_s" not in t:
            continue
        o = ours.get((t["tokens"], t["dtype"]))
        mine = f"{statistics.median(o):.3f}" if o else ""
        ratio = f"{t['step_s'] / statistics.median(o):.2f}x" if o else ""
        print(f"| {t['tokens']} | {t['dtype']} | {t['step_s']:.3f} ({t.get('torch', '?')}, {t.get('attention', '?')}) | "
              f"{t['anchor']} | {mine} | {ratio} |")
    print()


def whole(docs):
    print("## Whole dit-gen runs (8 steps, 256x256, decode and PNG included): wall seconds per round")
    runs = {}
    for d in docs:
        if d.get("exit") == 0:
            runs.setdefault(d["run"], {})[d["round"]] = d["wall_s"]
    for name, by_round in sorted(runs.items()):
        print(f"- {name}: {', '.join(f'{v:.2f}' for _, v in sorted(by_round.items()))}")
    for a, b, what in (("f32-all-cores", "bf16-all-cores", "bf16 against f32"),
                       ("bf16-all-cores", "bf16-winograd-all-cores",
                        "bf16 with the decoder by Winograd against AMX's direct kernel (DIT_VAE_WINOGRAD=all)"),
                       ("one-thread", "cfg-parallel-two-cores", "--cfg-parallel against one thread")):
        if a in runs and b in runs:
            ratios = [runs[a][r] / runs[b][r] for r in sorted(runs[a]) if r in runs[b]]
            if ratios:
                print(f"- {what}: {', '.join(f'{x:.2f}x' for x in ratios)} (median {statistics.median(ratios):.2f}x)")
    print()


def nodes(docs):
    print("## Simulated machines (tools/netbench.sh): speed-up over one node (serial: the rest of the box idle; "
          "serial-each: every node running serial at once)")
    print("| nodes | layout | tokens | step (s) | vs serial | vs serial-each | cores |")
    print("|---|---|---|---|---|---|---|")

    def ratio(x, each=None):
        if x is None:
            return ""
        return f"{x:.2f}x" + (f" ({', '.join(f'{r:.2f}' for r in each)})" if each else "")

    nodes_of = {}  # a layout's nodes and cores, from its rounds' lines, for its median line
    for d in docs:
        if "layout" not in d:
            continue
        if "speedup_vs_serial_median" in d or ("rounds" in d and "nodes" not in d):
            # netbench.sh with -- --rounds N: the medians over the rounds of one invocation
            n, cores = nodes_of.get(d["layout"], ("", ""))
            print(f"| {n} | {d['layout']}, median of {d.get('rounds', '?')} rounds | | {d.get('step_median_s', 0):.3f} | "
                  f"{ratio(d.get('speedup_vs_serial_median'), d.get('speedup_vs_serial_rounds'))} | "
                  f"{ratio(d.get('speedup_vs_serial_each_median'), d.get('speedup_vs_serial_each_rounds'))} | {cores} |")
            continue
        nodes_of[d["layout"]] = (d.get("nodes", ""), d.get("cores", ""))
        print(f"| {d.get('nodes', '')} | {d['layout']} | {d.get('tokens', '')} | {d.get('step_median_s', 0):.3f} | "
              f"{ratio(d.get('speedup_vs_serial'))} | {ratio(d.get('speedup_vs_serial_each'))} | {d.get('cores', '')} |")
    print()


def table(docs):
    print("## One denoising step of whole dit-gen runs (tools/step_table.sh): median step (s) over the rounds, "
          "and the median over the rounds of one process's step (same dtype, tokens, round) over the row's")
    ok = [d for d in docs if d.get("exit") == 0 and d.get("step_s")]
    sizes = sorted({d["tokens"] for d in docs})
    print("| layout | dtype | ranks x threads | " + " | ".join(f"{t} tokens" for t in sizes) + " |")
    print("|---|---|---|" + "---|" * len(sizes))
    base = {(d["dtype"], d["tokens"], d.get("round", 1)): d["step_s"] for d in ok if d["ranks"] == 1}
    rows = []  # (layout, dtype, ranks, threads) in the order first run
    for d in docs:
        k = (d["layout"], d["dtype"], d["ranks"], d["threads"])
        if k not in rows:
            rows.append(k)
    for layout, dtype, ranks, threads in rows:
        cells = []
        for t in sizes:
            mine = [d for d in docs if (d["layout"], d["dtype"], d["ranks"], d["tokens"]) == (layout, dtype, ranks, t)]
            good = [d for d in mine if d in ok]
            if not mine:
                cells.append("")
                continue
            if not good:
                cells.append("exit " + ", ".join(str(d.get("exit")) for d in mine))
                continue
            cell = f"{statistics.median(d['step_s'] for d in good):.3f}"
            ratios = [base[(dtype, t, d.get("round", 1))] / d["step_s"] for d in good
                      if (dtype, t, d.get("round", 1)) in base]
            if ranks > 1 and ratios:
                each = f"; {', '.join(f'{r:.2f}' for r in ratios)}" if len(ratios) > 1 else ""
                cell += f" ({statistics.median(ratios):.2f}x{each})"
            cells.append(cell)
        print(f"| {layout} | {dtype} | {ranks} x {threads} | " + " | ".join(cells) + " |")
    print()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 tools/scaling_summary.py OUT_DIR")
    d = sys.argv[1]
    # each section where its file has lines (tools/step_table.sh writes table.jsonl alone)
    layout_docs = load(os.path.join(d, "layouts.jsonl"))
    sections = [(layouts, [layout_docs]),
                (kernels, [load(os.path.join(d, "kernels.jsonl"))]),
                (torch_vs, [load(os.path.join(d, "torch.jsonl")), layout_docs]),
                (whole, [load(os.path.join(d, "whole.jsonl"))]),
                (nodes, [load(os.path.join(d, "nodes.jsonl"))]),
                (table, [load(os.path.join(d, "table.jsonl"))])]
    for section, args in sections:
        if args[0]:
            section(*args)


main()
