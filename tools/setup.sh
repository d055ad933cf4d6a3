#!/usr/bin/env bash
# Installs dit-gen's build and test dependencies from Debian 12's packages. Idempotent:
# when every package is already installed it does nothing (no apt-get update, no network).
set -euo pipefail
PKGS=(cmake g++ make pkg-config
      libdnnl-dev ocl-icd-opencl-dev   # oneDNN 2.6 (its CMake config needs OpenCL's)
      libgloo-dev libhiredis-dev       # Gloo 0.5 collectives (RedisStore links hiredis)
      libstb-dev                       # stb_image_write / stb_image
      catch2                           # Catch2 v2 tests
      nlohmann-json3-dev               # JSON
      libcli11-dev                     # command line
      libsentencepiece-dev             # T5 tokenizer (SentencePiece)
      redis-server                     # multi-machine rendezvous (and its test)
      iproute2 jq util-linux           # tools/netbench.sh: ip, tc, jq, taskset
      clang-14 libclang-rt-14-dev      # sanitizer build and libFuzzer harnesses (CI)
      libomp-14-dev llvm-14)           # clang's OpenMP; llvm-symbolizer for sanitizer stacks
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all dependencies present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
