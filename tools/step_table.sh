#!/bin/bash
# Issue 14's table: one denoising step of whole dit-gen runs, each parallel layout as a user
# runs it (default placement and threads per rank), at DiT-XL/2's dimensions and 28 layers,
# 1024 and 4096 tokens (512x512 and 1024x1024 images), f32 and bf16. About 5 minutes on 16
# cores; the README's benchmark section quotes its summary.
#
#   tools/step_table.sh OUT_DIR                  # after building (build/bin), or with a bundle:
#   source build/bundle/env.sh && tools/step_table.sh OUT_DIR --budget 540
#   tools/step_table.sh OUT_DIR --quick          # a smoke run: 1 layer, 256 tokens, 2 steps
#   tools/step_table.sh OUT_DIR --rounds 3       # the rows 3 times in turn (a noisy machine)
#
# Each run: dit-gen -m MODEL -p 207 --steps S -W PX -H PX --no-decode --progress json, S = 3 at
# 1024 tokens and 2 at 4096 (the first step creates the primitives and touches the pages; the
# step time is the median of the others). Layouts with more ranks than cores are skipped; each
# rank gets cores / ranks threads (-t). OUT_DIR gets table.jsonl (one line per run: layout,
# dtype, tokens, round, ranks, threads, step_s, the steps, wall_s, exit), log.txt (every command
# and its stderr) and, where $PYTHON (default python3) runs, summary.txt: per row the median
# step over the rounds, and the median of each round's one-process step over the row's. With --budget SECONDS the
# runs that would not fit are cut short or skipped, and logged. Model: the xl preset with
# LAYERS layers (default 28), created in DIT_BENCH_CACHE on first use (about 2.7 GB at 28).
set -uo pipefail

usage() {
  echo "usage: tools/step_table.sh OUT_DIR [--quick] [--budget SECONDS] [--rounds N]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
out=$1
shift
quick=0 budget=0 rounds=1
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --budget)
      [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge 60 ] ||
        { echo "tools/step_table.sh: --budget expects whole seconds, at least 60" >&2; exit 2; }
      budget=$2
      shift ;;
    --rounds)
      [ $# -ge 2 ] && [[ $2 =~ ^[1-9][0-9]*$ ]] ||
        { echo "tools/step_table.sh: --rounds expects a whole number, at least 1" >&2; exit 2; }
      rounds=$2
      shift ;;
    *) usage ;;
  esac
  shift
done
started=$SECONDS
here=$(cd "$(dirname "$0")" && pwd)
if command -v dit-gen >/dev/null; then bin=$(dirname "$(command -v dit-gen)"); else bin=$here/../build/bin; fi
for t in dit-gen dit-make-model; do
  [ -x "$bin/$t" ] || { echo "tools/step_table.sh: $bin/$t is missing: build first, or source a bundle's env.sh" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "tools/step_table.sh: jq is missing (tools/setup.sh installs it; a bundle has it)" >&2; exit 1; }
mkdir -p "$out" || exit 1
log=$out/log.txt
: >"$log"
rm -f "$out/table.jsonl" "$out/summary.txt"
scratch=$(mktemp -d) || exit 1
trap 'rm -rf "$scratch"' EXIT
cores=$(nproc)
if [ $quick = 1 ]; then layers=1 sizes="256:2"; else layers=${LAYERS:-28} sizes="1024:3 4096:2"; fi
export DIT_BENCH_CACHE=${DIT_BENCH_CACHE:-$HOME/.cache/dit-gen/bench}
model=$DIT_BENCH_CACHE/xl-L$layers-gen
echo "cores $cores, xl preset with $layers layers, tools from $bin, $(date -u +%FT%TZ)" >>"$log"
lscpu 2>/dev/null | grep -E '^Model name' >>"$log"
if [ ! -f "$model/model_index.json" ]; then
  rm -rf "$model"
  "$bin/dit-make-model" --preset xl --layers "$layers" --out "$model" >>"$log" 2>&1 ||
    { echo "tools/step_table.sh: dit-make-model failed (log: $log)" >&2; exit 1; }
fi

# The layouts: NAME|DTYPE|RANKS|dit-gen's parallel flags. The issue's rows, and the two-rank
# ones for machines with fewer than 8 cores.
rows=(
  "one process|f32|1|"
  "--cfg-parallel|f32|2|--cfg-parallel"
  "--ulysses 2|f32|2|--ulysses 2"
  "--ring 2|f32|2|--ring 2"
  "--cfg-parallel --ulysses 4|f32|8|--cfg-parallel --ulysses 4"
  "--cfg-parallel --ring 4|f32|8|--cfg-parallel --ring 4"
  "--ulysses 8|f32|8|--ulysses 8"
  "--ulysses 16|f32|16|--ulysses 16"
  "one process|bf16|1|"
  "--cfg-parallel|bf16|2|--cfg-parallel"
  "--cfg-parallel --ulysses 4|bf16|8|--cfg-parallel --ulysses 4"
)

# run_row ROUND TOKENS STEPS NAME DTYPE RANKS FLAGS: one dit-gen run, one line in table.jsonl.
run_row() {
  local round=$1 tokens=$2 steps=$3 name=$4 dtype=$5 ranks=$6 flags=$7
  local threads=$((cores / ranks)) px limit=300
  px=$(awk -v t="$tokens" 'BEGIN { printf "%d", sqrt(t) * 16 }')  # 2x2 patches of an 8x VAE latent
  if [ "$budget" -gt 0 ]; then
    local left=$((budget - 15 - (SECONDS - started)))
    if [ $left -lt 15 ]; then
      echo "== $(date -u +%T) $name $dtype $tokens round $round: skipped, ${left} s of the ${budget} s budget left" >>"$log"
      return
    fi
    [ $left -lt $limit ] && limit=$left
  fi
  # shellcheck disable=SC2206  # the flags are words
  local cmd=("$bin/dit-gen" -m "$model" -p 207 --steps "$steps" -W "$px" -H "$px" --no-decode --progress json
             --dtype "$dtype" -t "$threads" $flags)
  echo "== $(date -u +%T) ${cmd[*]}" >>"$log"
  local start=$EPOCHREALTIME
  timeout --kill-after=10 "$limit" "${cmd[@]}" >"$scratch/run.out" 2>&1  # progress lines are on stderr
  local rc=$? end=$EPOCHREALTIME
  cat "$scratch/run.out" >>"$log"
  echo "== exit $rc$([ $rc = 124 ] && echo ' (time limit)')" >>"$log"
  jq -ncR --arg layout "$name" --arg dtype "$dtype" --argjson tokens "$tokens" --argjson round "$round" \
    --argjson ranks "$ranks" \
    --argjson threads "$threads" --argjson rc $rc --argjson wall "$(jq -n "$end - $start")" '
    [inputs | fromjson? | objects | select(.event == "step") | .step_seconds] as $s
    | ($s[1:] | sort) as $w
    | {part: "table", layout: $layout, dtype: $dtype, tokens: $tokens, round: $round, ranks: $ranks, threads: $threads,
       exit: $rc, wall_s: $wall, steps_s: $s,
       step_s: (($w | length) as $n
                | if $n == 0 then null elif $n % 2 == 1 then $w[($n - 1) / 2]
                  else ($w[$n / 2 - 1] + $w[$n / 2]) / 2 end)}' \
    "$scratch/run.out" >>"$out/table.jsonl" 2>>"$log"
}

for size in $sizes; do
  for round in $(seq 1 "$rounds"); do
    for row in "${rows[@]}"; do
      IFS='|' read -r name dtype ranks flags <<<"$row"
      [ "$ranks" -le "$cores" ] || continue
      run_row "$round" "${size%%:*}" "${size##*:}" "$name" "$dtype" "$ranks" "$flags"
    done
  done
done

python=${PYTHON:-python3}
if command -v "$python" >/dev/null; then
  env -u LD_LIBRARY_PATH "$python" "$here/scaling_summary.py" "$out" >"$out/summary.txt" 2>>"$log"
  cat "$out/summary.txt"
else
  echo "tools/step_table.sh: no $python here: no summary.txt (python3 tools/scaling_summary.py $out elsewhere)" | tee -a "$log"
fi
echo "tools/step_table.sh: $(date -u +%T) done" >>"$log"
