#!/bin/bash
# Packs the built tools with the shared libraries they load, for a machine that has none of
# the project's packages (a benchmark box without a package registry):
#
#   tools/bundle.sh build/bundle            # after building (build/bin)
#   # on the other machine, in a copy of the repository:
#   source build/bundle/env.sh && dit-bench --preset tiny --steps 1
#
# bin/ holds dit-gen, dit-bench, dit-kernel-bench, dit-comm-bench, dit-make-model, jq and, where
# installed here, tools/netbench.sh's redis-server, redis-cli, ip, tc and taskset; lib/ every
# library they load except the C library's own (libc, libm, the dynamic loader: the machine's
# are used: it needs the glibc version written to glibc-needed or newer), each resolved by `ldd` here;
# env.sh puts bin/ first on PATH and lib/ on LD_LIBRARY_PATH, which the ranks a tool starts
# inherit. With --tar, one bundle.tar.xz beside the folder as well (about 15 MB).
set -euo pipefail

usage() {
  echo "usage: tools/bundle.sh OUT_DIR [--build DIR] [--tar]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
out=$1
shift
build=build
tar=0
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --tar) tar=1; shift ;;
    *) usage ;;
  esac
done
tools="dit-gen dit-bench dit-kernel-bench dit-comm-bench dit-make-model"
for t in $tools; do
  [ -x "$build/bin/$t" ] || { echo "tools/bundle.sh: $build/bin/$t is missing: build first (cmake --build $build)" >&2; exit 1; }
done
command -v ldd >/dev/null || { echo "tools/bundle.sh: ldd is missing (package libc-bin)" >&2; exit 1; }
jq=$(command -v jq) || { echo "tools/bundle.sh: jq is missing (tools/setup.sh installs it)" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
programs=("$jq")  # jq: tools/scaling_bench.sh writes its JSON lines with it
# tools/netbench.sh's programs, where this machine has them (the other may not)
for p in redis-server redis-cli ip tc taskset; do
  if path=$(command -v "$p"); then programs+=("$path"); fi
done
for t in $tools; do programs+=("$build/bin/$t"); done
cp "${programs[@]}" "$out/bin/"
# Every library any program loads, once; not the C library's (they must match the machine's loader).
missing=$(for p in "${programs[@]}"; do ldd "$p"; done | awk '/not found/ {print $1}' | sort -u)
[ -z "$missing" ] || { echo "tools/bundle.sh: libraries not found here: $missing" >&2; exit 1; }
for p in "${programs[@]}"; do ldd "$p"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  while read -r lib; do
    case $(basename "$lib") in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | ld-linux*) ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
cat >"$out/env.sh" <<'EOF'
# source this file: the bundled tools first on PATH, their libraries on LD_LIBRARY_PATH
_dit_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$_dit_bundle/bin:$PATH"
export LD_LIBRARY_PATH="$_dit_bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset _dit_bundle
EOF
# The glibc the tools need at least (the newest GLIBC_x.y symbol version they reference).
need=$(for p in "${programs[@]}"; do objdump -T "$p" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1 || true)
echo "${need:-unknown}" >"$out/glibc-needed"
if [ $tar = 1 ]; then
  tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
fi
echo "tools/bundle.sh: $out: $(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1); needs glibc ${need:-(version unknown)} or newer" >&2
