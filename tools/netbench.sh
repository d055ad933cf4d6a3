#!/usr/bin/env bash
# netbench: a multi-machine dit-bench run on one box. Each simulated node is a network
# namespace with its own cores; the nodes are joined by veth pairs to a bridge, every link
# shaped with tc (rate, and delay where the kernel has sch_netem), and the ranks meet over a
# redis-server this script starts, as they would on real machines.
#
#   sudo tools/netbench.sh --preset xl --layers 2 --size 256 --nodes 2 --rate 25gbit
#   sudo tools/netbench.sh --preset tiny --steps 2            # the CI smoke run
#   sudo tools/netbench.sh --preset xl --layers 4 --gen "-p 207 --steps 8 --cfg-parallel --ulysses 2"
#   sudo tools/netbench.sh --preset xl --layers 2 --size 1024 --nodes 4 --node-cpus 0.5 --layouts cfg2u2,u4
#
# With --node-cpus X, each node (and the serial baseline) gets X cores' time by a CFS quota in a
# cgroup of its own: more nodes than cores (4 at 0.5 on 2), waiting lost as on separate machines.
# With --gen, every node runs one whole dit-gen instead (launch, rendezvous, load, steps, decode,
# PNG), and one JSON line gives node 0's wall time and dit-gen's phase times.
# Prints one JSON line per layout (serial first, the one-node baseline; then serial-each, every
# node running serial at once): median step seconds and the speedup over each. On one box the
# simulated nodes share its memory bandwidth, caches and power budget, which separate
# machines would not: serial has them to itself, serial-each shares them as the layouts do.
# With `-- --rounds N` (dit-bench's) every layout runs N times in turn, one line per run, then
# one line per layout with the medians over the rounds.
# Needs root, iproute2 (ip, tc), redis-server, taskset, jq.
# Cleans up its namespaces, links, cgroups and redis-server on exit, however it ends.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: tools/netbench.sh [options] [-- dit-bench options]
  --preset NAME     dit-bench preset (tiny, small, demo, xl, ...)       [tiny]
  --layers N        override the preset's depth                        [preset's]
  --size PIXELS     image sizes, comma-separated (DiT/2: tokens = (size/16)^2: 256 -> 256,
                    512 -> 1024, 1024 -> 4096)                       [the model's]
  --nodes N         simulated machines                                  [2]
  --rate RATE       link rate of every node, tc syntax (10gbit, 25gbit)  [25gbit]
  --delay TIME      one-way delay per link, tc syntax (e.g. 50us, 100us) [80us]
                    (needs sch_netem; without it the links are rate-shaped only, and
                    the JSON says "delay_applied": false)
  --layouts LIST    parallel layouts, comma-separated, compared against serial
                    [cfg2,u2,r2,u2r2,tp2]
  --steps N         timed steps (median reported)                       [3]
  --warmup N        untimed steps first                                 [1]
  --threads N       threads per rank                  [cores per node / ranks per node]
  --node-cpus X     give each node X cores' worth of time (a CFS quota in a cgroup, e.g. 0.5)
                    instead of whole cores: more nodes than cores, each as fast as the serial
                    baseline on node 0 (which runs under the same quota). Nodes still share the
                    cores they are pinned to; a waiting node's time is not lent to the others,
                    as on separate machines                               [off]
  --bin DIR         where dit-bench and dit-make-model are               [build/bin]
  --cache DIR       where preset models are created and reused        [dit-bench's]
  --keep-logs DIR   copy each node's JSON and log here
  --gen ARGS        run `dit-gen ARGS` on every node (its layout flags give the world size;
                    -m, --nnodes, --node-rank, --rendezvous and -o are added) instead of dit-bench
  -- ARGS...        passed to every node's dit-bench as they are (e.g. -- --ulysses-chunks 1)
EOF
}

die() { echo "netbench: error: $*" >&2; exit 2; }

preset=tiny layers=0 sizes="" nodes=2 rate=25gbit delay=80us layouts=cfg2,u2,r2,u2r2,tp2
steps=3 warmup=1 threads=0 bin=build/bin cache="" keep="" gen="" node_cpus=""
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    --preset|--layers|--size|--nodes|--rate|--delay|--layouts|--steps|--warmup|--threads|--bin|--cache|--keep-logs|--gen|--node-cpus)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in
        --preset) preset=$2 ;; --layers) layers=$2 ;; --size) sizes=$2 ;; --nodes) nodes=$2 ;;
        --rate) rate=$2 ;; --delay) delay=$2 ;; --layouts) layouts=$2 ;; --steps) steps=$2 ;;
        --warmup) warmup=$2 ;; --threads) threads=$2 ;; --bin) bin=$2 ;; --cache) cache=$2 ;;
        --keep-logs) keep=$2 ;; --gen) gen=$2 ;; --node-cpus) node_cpus=$2 ;;
      esac
      shift 2 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
for v in layers nodes steps warmup threads; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v} must be a whole number, got '${!v}'"
done
[ "$nodes" -ge 2 ] && [ "$nodes" -le 64 ] || die "--nodes must be in 2..64, got $nodes"
[[ $rate =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit)$ ]] || die "--rate must look like 10gbit or 25gbit, got '$rate'"
[[ $delay =~ ^[0-9]+(\.[0-9]+)?(us|ms)$ ]] || die "--delay must look like 50us or 1ms, got '$delay'"
[[ $layouts =~ ^[a-z0-9,]+$ ]] || die "--layouts must be a comma-separated list like cfg2,u2, got '$layouts'"
if [ -n "$node_cpus" ]; then
  [[ $node_cpus =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v x="$node_cpus" 'BEGIN { exit !(x >= 0.05 && x <= 1024) }' ||
    die "--node-cpus must be a number of cores from 0.05 (e.g. 0.5), got '$node_cpus'"
fi

# ------------------------------------------------------------------ refuse clearly
[ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth links and tc); run it with sudo"
for t in ip tc redis-server redis-cli taskset jq; do
  command -v "$t" > /dev/null ||
    die "'$t' is missing (install iproute2, redis-server, util-linux and jq; tools/setup.sh does)"
done
for t in dit-bench dit-make-model ${gen:+dit-gen}; do
  [ -x "$bin/$t" ] || die "$bin/$t not found: build first (cmake --build build) or pass --bin DIR"
done
bin=$(cd "$bin" && pwd)

# ------------------------------------------------------------------ cleanup, whatever happens
tag="dnb$$"                        # names of this run's namespaces and links (<= 15 chars)
net="10.$((200 + $$ % 50)).$(( ($$ / 50) % 250 ))"   # a /24 of its own
work=$(mktemp -d /tmp/netbench-XXXXXX)
pids=() redis_pid="" node_cg=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null || true; done
  [ -n "$redis_pid" ] && { kill "$redis_pid" 2> /dev/null || true; wait "$redis_pid" 2> /dev/null || true; }
  for ((k = 0; k < nodes; k++)); do ip netns del "$tag-n$k" 2> /dev/null || true; done
  ip link del "${tag}br" 2> /dev/null || true
  for g in "${node_cg[@]}"; do rmdir "$g" 2> /dev/null || true; done
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ cores per node
mapfile -t cpus < <(taskset -pc $$ | sed 's/.*: //' | tr ',' '\n' |
  awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) print i; else print $1 }')
ncpu=${#cpus[@]}
per=$((ncpu / nodes))
cores_note="each node on $per of $ncpu cores"
if [ "$per" -lt 1 ]; then per=1; cores_note="more nodes than cores: nodes share cores"; fi
node_cores() {  # node k -> "a,b,..."
  local k=$1 i out=""
  for ((i = 0; i < per; i++)); do out+="${out:+,}${cpus[$(((k * per + i) % ncpu))]}"; done
  echo "$out"
}

# ------------------------------------------------------------------ CPU quota per node
# With --node-cpus, node k's processes run in a cgroup of their own whose CFS quota is that
# many cores (cgroup v2's cpu.max, or v1's cpu controller); node_cg[k] is its directory
# (removed on exit).
quota_period=10000   # µs: a short period, so that a throttled node delays its peers by < 10 ms
make_node_cgroup() {  # make_node_cgroup K: appends node K's cgroup to node_cg
  local k=$1 quota dir
  quota=$(awk -v x="$node_cpus" -v p="$quota_period" 'BEGIN { printf "%d", x * p }')
  if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    dir=/sys/fs/cgroup/$tag-n$k
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control ||
      die "--node-cpus: cannot enable the cpu controller in /sys/fs/cgroup (cgroup v2)"
    mkdir "$dir" || die "--node-cpus: cannot create the cgroup $dir"
    node_cg+=("$dir")
    echo "$quota $quota_period" > "$dir/cpu.max" || die "--node-cpus: cannot write $dir/cpu.max"
  elif [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
    dir=/sys/fs/cgroup/cpu/$tag-n$k
    mkdir "$dir" || die "--node-cpus: cannot create the cgroup $dir"
    node_cg+=("$dir")
    { echo "$quota_period" > "$dir/cpu.cfs_period_us" && echo "$quota" > "$dir/cpu.cfs_quota_us"; } ||
      die "--node-cpus: cannot set the CFS quota in $dir"
  else
    die "--node-cpus: no cgroup cpu controller (neither cgroup v2 with cpu nor /sys/fs/cgroup/cpu)"
  fi
}
if [ -n "$node_cpus" ]; then
  # Every core must have the time its nodes are promised: node k spreads X over the `per`
  # cores it is pinned to, and no core may be asked for more than all of itself.
  pinned=$(for ((k = 0; k < nodes; k++)); do node_cores "$k"; done | tr ',' ' ')
  most=$(echo "$pinned" | awk -v x="$node_cpus" -v per="$per" '
    { for (i = 1; i <= NF; i++) load[$i] += x / per }
    END { m = 0; for (c in load) if (load[c] > m) m = load[c]; printf "%.3f", m }')
  awk -v m="$most" 'BEGIN { exit !(m <= 1.0005) }' ||
    die "--node-cpus $node_cpus: with $nodes nodes pinned to $ncpu cores, a core would owe ${most}x its time; use at most $(awk -v x="$node_cpus" -v m="$most" 'BEGIN { printf "%.3g", x / m }')"
  for ((k = 0; k < nodes; k++)); do make_node_cgroup "$k"; done
  cores_note+=", $node_cpus cores' time each (CFS quota)"
fi
# in_cgroup K: the words that start a command in node K's cgroup (nothing without --node-cpus)
in_cgroup=()
set_in_cgroup() {
  in_cgroup=()
  [ -n "$node_cpus" ] && in_cgroup=(/usr/bin/env bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "${node_cg[$1]}")
  return 0
}

# ------------------------------------------------------------------ the network
tc_shape() {  # tc_shape NETNS|"" DEV
  local ns=(); [ -n "$1" ] && ns=(ip netns exec "$1")
  if [ "$delay_applied" = true ]; then
    "${ns[@]}" tc qdisc add dev "$2" root netem delay "$delay" rate "$rate" limit 100000
  else
    # tbf: a burst of 1 ms at the rate (at least 64 KiB), queue up to 10 ms
    local bps; bps=$(echo "$rate" | awk '{ v = $1 + 0; u = $1; sub(/^[0-9.]+/, "", u);
      m = (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : 1; printf "%d", v * m }')
    local burst=$((bps / 8 / 1000)); [ "$burst" -lt 65536 ] && burst=65536
    "${ns[@]}" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 10ms
  fi
}
delay_applied=true
ip link add "${tag}t" type veth peer name "${tag}u" 2> /dev/null || die "cannot create veth links (ip link add ... type veth)"
tc qdisc add dev "${tag}t" root netem delay "$delay" 2> /dev/null || delay_applied=false
ip link del "${tag}t"
[ "$delay_applied" = true ] ||
  echo "netbench: the kernel has no sch_netem: links are rate-limited with tbf, without the $delay delay" >&2

ip link add "${tag}br" type bridge
ip link set "${tag}br" up
ip addr add "$net.254/24" dev "${tag}br"
for ((k = 0; k < nodes; k++)); do
  ns="$tag-n$k"
  ip netns add "$ns"
  ip link add "${tag}v$k" type veth peer name "${tag}p$k"
  ip link set "${tag}p$k" netns "$ns"
  ip link set "${tag}v$k" master "${tag}br"
  ip link set "${tag}v$k" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip addr add "$net.$((k + 1))/24" dev "${tag}p$k"
  ip netns exec "$ns" ip link set "${tag}p$k" up
  tc_shape "$ns" "${tag}p$k"   # what node k sends
  tc_shape "" "${tag}v$k"      # what node k receives
done

# ------------------------------------------------------------------ redis, on the bridge
port=$((20000 + $$ % 20000))
redis-server --bind "$net.254" --port "$port" --save "" --appendonly no --protected-mode no \
  --daemonize no --loglevel warning > "$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 50); do
  redis-cli -h "$net.254" -p "$port" ping > /dev/null 2>&1 && break
  kill -0 "$redis_pid" 2> /dev/null || die "redis-server did not start: $(tail -1 "$work/redis.log")"
  sleep 0.1
done
redis-cli -h "$net.254" -p "$port" ping > /dev/null 2>&1 || die "redis-server on $net.254:$port does not answer"

# ------------------------------------------------------------------ the model, once
[ -n "$cache" ] || cache=${DIT_BENCH_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/dit-gen/bench}
model="$cache/$preset"
[ "$layers" -gt 0 ] && model+="-L$layers"
if [ ! -f "$model/model_index.json" ]; then
  mkdir -p "$cache"
  echo "netbench: creating the $preset preset model in $model" >&2
  "$bin/dit-make-model" --preset "$preset" --layers "$layers" --out "$work/model" > /dev/null ||
    die "dit-make-model --preset $preset failed"
  rm -rf "$model"
  mv "$work/model" "$model"
fi

# ------------------------------------------------------------------ run every node
link="$rate"
[ "$delay_applied" = true ] && link+=", $delay"
echo "netbench: $nodes nodes ($cores_note), links $link, redis $net.254:$port" >&2
for ((k = 0; k < nodes; k++)); do
  cores=$(node_cores "$k")
  set_in_cgroup "$k"
  t=$threads
  [ "$t" -gt 0 ] || t=$per   # one rank per node for cfg2/u2/r2/tp2; u2r2 puts 2 on a node
  if [ -n "$gen" ]; then
    # shellcheck disable=SC2086  # --gen's words are dit-gen's arguments
    setsid ${in_cgroup[@]+"${in_cgroup[@]}"} ip netns exec "$tag-n$k" env DIT_ADDR="$net.$((k + 1))" taskset -c "$cores" \
      /usr/bin/env bash -c 's=$(date +%s.%N); "$@"; rc=$?; awk -v a="$s" -v b="$(date +%s.%N)" "BEGIN { printf \"wall %.3f\n\", b - a }" >&2; exit $rc' _ \
      "$bin/dit-gen" -m "$model" $gen -v --progress none --nnodes "$nodes" --node-rank "$k" \
      --rendezvous "redis://$net.254:$port/$tag" -o "$work/node$k.png" > "$work/node$k.json" 2> "$work/node$k.log" &
    pids+=($!)
    continue
  fi
  setsid ${in_cgroup[@]+"${in_cgroup[@]}"} ip netns exec "$tag-n$k" env DIT_ADDR="$net.$((k + 1))" taskset -c "$cores" \
    "$bin/dit-bench" --model "$model" ${sizes:+--size "$sizes"} --layouts "serial,serial-each,$layouts" --steps "$steps" \
    --warmup "$warmup" --threads "$t" --nnodes "$nodes" --node-rank "$k" \
    --rendezvous "redis://$net.254:$port/$tag" ${extra[@]+"${extra[@]}"} > "$work/node$k.json" 2> "$work/node$k.log" &
  pids+=($!)
done
failed=""
for ((k = 0; k < nodes; k++)); do
  wait "${pids[$k]}" || failed+=" $k"
done
pids=()
if [ -n "$keep" ]; then
  mkdir -p "$keep"
  cp "$work"/node*.json "$work"/node*.log "$keep"/
fi
if [ -n "$failed" ]; then
  for k in $failed; do echo "--- node $k:" >&2; tail -20 "$work/node$k.log" >&2; done
  die "${gen:+dit-gen}${gen:-dit-bench} failed on node(s)$failed"
fi
if [ -n "$gen" ]; then  # node 0's wall time and phase times ("dit-gen: times: connect 0.01 s, load ...")
  times=$(grep -h '^dit-gen: times: ' "$work/node0.log" | tail -1 | sed 's/^dit-gen: times: //')
  jq -nc --arg args "$gen" --argjson nodes "$nodes" --arg rate "$rate" --arg cores "$cores_note" \
    --argjson wall "$(grep -h '^wall ' "$work/node0.log" | tail -1 | cut -d' ' -f2)" --arg times "$times" '
    {dit_gen: $args, nodes: $nodes, rate: $rate, cores: $cores, wall_s_node0: $wall}
    + ($times | [scan("([a-z]+) ([0-9.]+) s") | {key: (.[0] + "_s"), value: (.[1] | tonumber)}] | from_entries)'
  exit 0
fi

# ------------------------------------------------------------------ one JSON line per layout
jq -c --arg rate "$rate" --arg delay "$delay" --argjson delay_applied "$delay_applied" \
  --argjson nodes "$nodes" --arg cores "$cores_note" '
  (.runs[] | {layout, round, nodes: $nodes, ranks, ranks_per_node: (.ranks_here // 1), size, tokens,
    threads_per_rank, rate: $rate, delay: (if $delay_applied then $delay else null end),
    delay_applied: $delay_applied, cores: $cores, step_median_s: .step_s,
    speedup_vs_serial: (.speedup_vs_serial // (if .layout == "serial" then 1 else null end)),
    speedup_vs_serial_each: (.speedup_vs_serial_each // (if .layout == "serial-each" then 1 else null end)),
    latents_rel_diff_vs_serial, bytes_sent_per_step: .bytes_sent_per_step_all_ranks,
    communication_s_rank0: (.breakdown_s_rank0.communication // null),
    waiting_s_rank0: (.breakdown_s_rank0.waiting // null), oversubscribed, error}
  | with_entries(select(.value != null))),
  (.summary[]? | select(.rounds > 1) | {layout, size, rounds, step_median_s: .step_s_median,
    speedup_vs_serial_median, speedup_vs_serial_rounds, speedup_vs_serial_each_median,
    speedup_vs_serial_each_rounds} | with_entries(select(.value != null)))' "$work/node0.json"
