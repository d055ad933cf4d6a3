#!/bin/bash
# The many-core measurements of one machine in one go (about 8 minutes on 16 cores): every
# parallel layout against one process with all cores (same total threads) at 1024 and 4096
# tokens in f32 and bf16, exposed communication with one thread per rank, the kernels against
# the GEMM, PyTorch (eager and torch.compile) on the same weights where it is installed, whole
# dit-gen runs, and simulated machines where the machine allows network namespaces.
#
#   tools/scaling_bench.sh OUT_DIR                 # after building (build/bin), or with a bundle:
#   source build/bundle/env.sh && tools/scaling_bench.sh OUT_DIR
#   tools/scaling_bench.sh OUT_DIR --quick         # a 1-minute smoke run at small sizes
#   tools/scaling_bench.sh OUT_DIR --budget 540    # end within 540 s, summary included (a lent
#                                                  # machine's time limit): parts that would not
#                                                  # fit are cut short or skipped, and logged
#   tools/scaling_bench.sh OUT_DIR --parts 'one-thread|4096|netbench'   # only the parts whose
#                                                  # name matches (an extended regex; the names
#                                                  # are in log.txt; whole runs: "whole")
#
# OUT_DIR gets layouts.jsonl (one dit-bench document per line), kernels.jsonl, torch.jsonl,
# whole.jsonl (whole dit-gen runs), nodes.jsonl (simulated machines, where allowed), log.txt
# (every command, its stderr and exit status) and, where $PYTHON runs, summary.txt (the ratios
# the benchmark section of the README quotes). Needs jq (a bundle has it). Every part runs
# under its own time limit and a part that fails or runs out of time is logged and skipped, so
# a run cut short still leaves what it measured. Model: the xl preset (DiT-XL/2 dimensions) with LAYERS layers (default 4; ratios
# per step, the full 28 layers take 7x as long), created in DIT_BENCH_CACHE on first use.
# PYTHON: the interpreter for the summary and PyTorch (default python3; for PyTorch, without
# PYTHON, the first of python3, /usr/bin/python3, /usr/local/bin/python3 and python that
# imports torch).
set -uo pipefail

usage() {
  echo "usage: tools/scaling_bench.sh OUT_DIR [--quick] [--budget SECONDS] [--parts REGEX]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
out=$1
shift
quick=0 budget=0 parts=
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --budget)
      [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge 60 ] ||
        { echo "tools/scaling_bench.sh: --budget expects whole seconds, at least 60" >&2; exit 2; }
      budget=$2
      shift ;;
    --parts)
      [ $# -ge 2 ] && [ -n "$2" ] && { echo | grep -Eq "$2" 2>/dev/null; [ $? -le 1 ]; } ||
        { echo "tools/scaling_bench.sh: --parts expects an extended regular expression (e.g. 'one-thread|netbench')" >&2; exit 2; }
      parts=$2
      shift ;;
    *) usage ;;
  esac
  shift
done
started=$SECONDS
reserve=20  # the budget's last seconds: the summary, and a part's kill-after
here=$(cd "$(dirname "$0")" && pwd)
if command -v dit-bench >/dev/null; then bin=$(dirname "$(command -v dit-bench)"); else bin=$here/../build/bin; fi
for t in dit-bench dit-kernel-bench; do
  [ -x "$bin/$t" ] || { echo "tools/scaling_bench.sh: $bin/$t is missing: build first, or source a bundle's env.sh" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "tools/scaling_bench.sh: jq is missing (tools/setup.sh installs it; a bundle has it)" >&2; exit 1; }
python=${PYTHON:-python3}  # the summary, and PyTorch where this python imports torch
py=0
command -v "$python" >/dev/null && py=1
# Python runs with the machine's own libraries, not a bundle's (its torch may need a newer libstdc++).
pyrun() { env -u LD_LIBRARY_PATH "$python" "$@"; }
# The interpreter that imports torch (PyTorch may live in another Python than the first on PATH).
torch_python=
for c in ${PYTHON:-python3 /usr/bin/python3 /usr/local/bin/python3 python}; do
  if command -v "$c" >/dev/null && env -u LD_LIBRARY_PATH "$c" -c 'import torch' 2>/dev/null; then
    torch_python=$c
    break
  fi
done
mkdir -p "$out" || exit 1
scratch=$(mktemp -d) || exit 1  # temporary files stay out of OUT_DIR
trap 'rm -rf "$scratch"' EXIT
log=$out/log.txt
: >"$log"
# a rerun into the same OUT_DIR starts afresh (the parts append to these)
rm -f "$out"/{kernels,layouts,torch,whole,nodes}.jsonl "$out/summary.txt"
cores=$(nproc)
layers=${LAYERS:-4}
export DIT_BENCH_CACHE=${DIT_BENCH_CACHE:-$HOME/.cache/dit-gen/bench}
if [ $quick = 1 ]; then
  layers=1 small=256 large=256 steps="--steps 1 --warmup 1" rounds=1
else
  small=512 large=1024 steps="--steps 2 --warmup 1" rounds=2
fi
kruns=$((quick == 1 ? 5 : 15))  # timed runs of each kernel measurement
model=$DIT_BENCH_CACHE/xl-L$layers
echo "cores $cores, xl preset with $layers layers, tools from $bin, $(date -u +%FT%TZ)" >>"$log"
lscpu 2>/dev/null | grep -E '^(Model name|Flags)' | cut -c1-400 >>"$log"

# fit_budget NAME LIMIT_S: with --budget, sets $fitted to LIMIT_S or what is left of the budget
# (less the reserve), whichever is smaller; false (and logged) when under 15 s are left.
fit_budget() {
  fitted=$2
  if [ -n "$parts" ] && ! grep -Eq "$parts" <<<"$1"; then
    echo "== $(date -u +%T) $1: not in --parts '$parts'" >>"$log"
    return 1
  fi
  [ "$budget" -gt 0 ] || return 0
  local left=$((budget - reserve - (SECONDS - started)))
  if [ $left -lt 15 ]; then
    echo "== $(date -u +%T) $1: skipped, ${left} s of the ${budget} s budget left" >>"$log"
    return 1
  fi
  [ $left -lt "$fitted" ] && fitted=$left
  return 0
}

# part NAME LIMIT_S FILE CMD...: runs CMD under a time limit, appends its JSON output (compacted to
# one line per document) to OUT_DIR/FILE, its stderr and exit status to the log.
part() {
  local name=$1 limit=$2 file=$3
  shift 3
  fit_budget "$name" "$limit" || return 0
  limit=$fitted
  echo "== $(date -u +%T) $name: $*" >>"$log"
  local tmp=$scratch/part.out
  timeout --kill-after=10 "$limit" "$@" >"$tmp" 2>>"$log"
  local rc=$?
  jq -c --arg part "$name" 'if type == "object" then . + {part: $part} else . end' "$tmp" >>"$out/$file" 2>>"$log"
  echo "== $(date -u +%T) $name: exit $rc$([ $rc = 124 ] && echo ' (time limit)')" >>"$log"
  rm -f "$tmp"
}

bench=("$bin/dit-bench" --preset xl --layers "$layers" $steps)

# 1. Kernels at all cores: the GEMM reference, attention (f32 and bf16), the copies, the
# linears; medians of 15 runs each (a 16-core machine's single runs ranged 0.5-1.2x of their
# median; the whole part takes about 20 s).
part kernels 90 kernels.jsonl "$bin/dit-kernel-bench" -t "$cores" --runs $kruns --only gemm
part kernels 90 kernels.jsonl "$bin/dit-kernel-bench" -t "$cores" --runs $kruns --only attention --no-4096 --head-dim 72,80,96
# bf16 attention with Q and K zero-padded to a multiple of 32 for Q·Kᵀ and without (AMX reduces
# in tiles of 32; the runtime pads where oneDNN uses AMX: 11% faster there, the eighteenth
# session), over the QKV rows (run(): padded planes) and over planes made once (--dense:
# run_dense, Ulysses' and the ring's form, which pads each block as it goes).
part kernels 60 kernels.jsonl "$bin/dit-kernel-bench" -t "$cores" --runs $kruns --only attention --no-4096 --bf16-pad-qk --dense
part kernels 60 kernels.jsonl "$bin/dit-kernel-bench" -t "$cores" --runs $kruns --only copy
# The block's linears with the weights as they are read (in place) and reordered into the
# matmul's preferred layout (what a packed weight cache would give); the gated ones also with
# the gate in a pass after a plain matmul instead of as its post-ops.
if [ $quick = 1 ]; then lruns="--runs 1 --warmup 0"; else lruns="--runs $kruns"; fi
part kernels 90 kernels.jsonl "$bin/dit-kernel-bench" -t "$cores" $lruns --only linear --packed --gate-after-matmul
# The VAE's 3x3 convolutions at its three sizes: oneDNN's direct kernels (f32, bf16: AMX where
# the CPU has it) against the Winograd forms (oneDNN's f32 F(4x4, 3x3), dit-gen's bf16 F(2x2,
# 3x3)): where oneDNN has AMX the decoder keeps the direct bf16 kernel, never measured against
# this one (VaeDecoder::winograd_for). About 9 s on the 2-core VM.
part kernels 60 kernels.jsonl "$bin/dit-kernel-bench" -t "$cores" $lruns --only conv

# 2. One machine, 1024 tokens: each layout of R ranks with cores/R threads against serial-all.
for r in 2 4 8 16; do
  [ $r -le "$cores" ] || continue
  t=$((cores / r))
  case $r in
    2) l=cfg2,u2,r2,tp2 ;;
    4) l=cfg2u2,u4,u2r2 ;;
    8) l=cfg2u4,u8,r8 ;;
    16) l=cfg2u8,u16 ;;
  esac
  part "layouts-$r" 150 layouts.jsonl "${bench[@]}" --rounds $rounds --size $small --dtype f32,bf16 -t $t --layouts serial-all,$l
done

# 3. One thread per rank, 8 ranks (2 on a smaller machine), 1024 tokens: the share of the step
# spent communicating and waiting (bf16 too: its shorter steps expose more of it).
if [ "$cores" -ge 8 ]; then l=cfg2u4,u8,r8; else l=cfg2,u2,r2; fi
part one-thread-ranks 240 layouts.jsonl "${bench[@]}" --rounds $rounds --size $small --dtype f32,bf16 -t 1 --layouts serial,$l
# The same with each rank's Q, K, V and feed-forward rows its own (--share-rows off; the default
# shares them at one thread a rank: parallel/shared_rows.h), against the part above.
part one-thread-ranks-unshared 240 layouts.jsonl "${bench[@]}" --rounds $rounds --size $small --dtype f32,bf16 -t 1 \
  --share-rows off --layouts serial,$l

# 4. PyTorch on the same weights and threads, alternating with dit-gen's one process.
if [ -n "$torch_python" ]; then
  echo "== torch: $torch_python ($(env -u LD_LIBRARY_PATH "$torch_python" -c 'import torch; print(torch.__version__)'))" >>"$log"
  for mode in eager compile; do
    part "torch-$mode" 240 torch.jsonl env -u LD_LIBRARY_PATH "$torch_python" "$here/torch_anchor.py" "$model" $small f32,bf16 3 $mode "$cores"
    part "dit-gen-vs-torch" 90 layouts.jsonl "${bench[@]}" --size $small --dtype f32,bf16 --layouts serial-all
  done
else
  echo "== torch: no python here imports torch (${PYTHON:-python3, /usr/bin/python3, /usr/local/bin/python3, python}); skipped" >>"$log"
fi

# 5. 4096 tokens: two- and eight-rank layouts, then PyTorch eager.
[ $quick = 1 ] || {
  part "layouts-4096-2" 200 layouts.jsonl "${bench[@]}" --size $large --dtype f32,bf16 -t $((cores / 2)) --rounds 1 \
    --layouts serial-all,cfg2,u2,r2
  [ "$cores" -ge 8 ] && part "layouts-4096-8" 150 layouts.jsonl "${bench[@]}" --size $large --dtype f32,bf16 \
    -t $((cores / 8)) --rounds 1 --layouts serial-all,cfg2u4
  # The same two-rank layouts with the shared memory on 4 KB pages, against the part above
  # (parallel/shm_mapping.h; on the 2-core VM the windows' copies then took 2-14% of the step).
  part "layouts-4096-2-4kb-pages" 120 layouts.jsonl env DIT_NO_SHM_HUGE_PAGES=1 "${bench[@]}" --size $large \
    --dtype f32 -t $((cores / 2)) --rounds 1 --layouts serial-all,u2,r2
  [ -n "$torch_python" ] &&
    part "torch-eager-4096" 150 torch.jsonl env -u LD_LIBRARY_PATH "$torch_python" "$here/torch_anchor.py" "$model" $large f32,bf16 2 eager "$cores"
}

# 6. Simulated machines (tools/netbench.sh: network namespaces, veth links shaped by tc, redis),
# where this machine allows them (root, ip, tc, redis-server): 2 and 4 nodes at 25 Gbit/s,
# 4096 tokens, each node on its own cores, against one node; 4 nodes on 2 or 3 cores get half
# a core's time each (netbench.sh --node-cpus 0.5, where cgroups can be written).
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v tc >/dev/null && command -v redis-server >/dev/null &&
  ip netns add dit-sb-probe 2>>"$log" && ip netns del dit-sb-probe; then
  nb=("$here/netbench.sh" --bin "$bin" --preset xl --layers "$layers" --rate 25gbit $steps)
  if [ $quick = 1 ]; then
    part netbench-2 120 nodes.jsonl "${nb[@]}" --size $large --nodes 2 --layouts cfg2,u2
  else
    # two rounds, each against its own one-node run: a 16-core machine's one-node step moved by
    # a third between invocations
    part netbench-2 280 nodes.jsonl "${nb[@]}" --size $large --nodes 2 --layouts cfg2,u2,r2 -- --rounds 2
    if [ "$cores" -ge 4 ]; then
      part netbench-4 280 nodes.jsonl "${nb[@]}" --size $large --nodes 4 --layouts cfg2u2,u4 -- --rounds 2
    else
      part netbench-4 300 nodes.jsonl "${nb[@]}" --size $large --nodes 4 --node-cpus 0.5 --layouts cfg2u2,u4 -- --rounds 2
    fi
  fi
else
  echo "== netbench: needs root, ip, tc, redis-server and network namespaces here; skipped" >>"$log"
fi

# 7. Whole dit-gen runs (launch, load, 8 steps, VAE decode, PNG) of the xl preset with LAYERS
# layers at 256x256: bf16 against f32 on all cores, and --cfg-parallel against one thread on
# two cores (the issue's two-core comparison). One JSON line per run in whole.jsonl.
gen_model=$DIT_BENCH_CACHE/xl-L$layers-gen
[ -f "$gen_model/model_index.json" ] || { [ -n "$parts" ] && ! grep -Eq "$parts" <<<whole; } ||
  "$bin/dit-make-model" --preset xl --layers "$layers" --out "$gen_model" >>"$log" 2>&1
whole() {  # whole ROUND NAME CPUS ARGS...: CPUS a taskset list, or "all"
  local round=$1 name=$2 cpus=$3
  shift 3
  fit_budget "whole $name round $round" 120 || return 0
  local pre=()
  [ "$cpus" = all ] || pre=(taskset -c "$cpus")
  local start=$EPOCHREALTIME
  timeout "$fitted" "${pre[@]}" "$bin/dit-gen" -m "$gen_model" --progress none -p 207 --steps 8 -o "$scratch/whole.png" "$@" \
    >>"$log" 2>&1
  local rc=$? end=$EPOCHREALTIME
  jq -nc --arg run "$name" --argjson round "$round" --argjson rc $rc --argjson wall "$(jq -n "$end - $start")" \
    '{part: "whole", run: $run, round: $round, exit: $rc, wall_s: $wall}' >>"$out/whole.jsonl"
}
amx=0
grep -qw amx_bf16 /proc/cpuinfo 2>/dev/null && amx=1
if [ -f "$gen_model/model_index.json" ] && [ "$cores" -ge 2 ] && command -v taskset >/dev/null; then
  echo "== $(date -u +%T) whole runs (AMX: $amx)" >>"$log"
  for round in $(seq 1 $((quick == 1 ? 1 : 3))); do
    whole $round f32-all-cores all --dtype f32
    whole $round bf16-all-cores all --dtype bf16
    # With AMX the bf16 decoder's convolutions stay oneDNN's direct kernel: the same run with
    # them by dit-gen's Winograd F(2x2, 3x3) (DIT_VAE_WINOGRAD=all), to compare.
    [ "$amx" = 1 ] && DIT_VAE_WINOGRAD=all whole $round bf16-winograd-all-cores all --dtype bf16
    whole $round one-thread 0,1 -t 1
    whole $round cfg-parallel-two-cores 0,1 --cfg-parallel
  done
else
  echo "== whole runs: no model, fewer than 2 cores or no taskset; skipped" >>"$log"
fi

if [ $py = 1 ]; then
  pyrun "$here/scaling_summary.py" "$out" >"$out/summary.txt" 2>>"$log"
  cat "$out/summary.txt"
else
  echo "tools/scaling_bench.sh: no $python here: no summary.txt (python3 tools/scaling_summary.py $out elsewhere)" | tee -a "$log"
fi
echo "tools/scaling_bench.sh: $(date -u +%T) done" >>"$log"
