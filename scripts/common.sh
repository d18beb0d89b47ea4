# Shared set-up for scripts/demo and scripts/test: install missing Debian packages, configure,
# build, and run CTest. Sourced, not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HALFWAY_BUILD_DIR:-$ROOT/build}"
CMAKE_ARGS=()       # more cmake options for build (scripts/test --sanitize, scripts/fuzz)
EXCLUDE_LABELS=exhaustive  # the labels (a regex) of the tests that the default set leaves out
JOBS="$(nproc 2>/dev/null || echo 2)"

# Debian packages the build and the tests need (Debian 12).
PACKAGES=(build-essential cmake libboost-dev libfmt-dev catch2 libcli11-dev libtomlplusplus-dev
          nlohmann-json3-dev libhwy-dev python3-numpy libzip-dev
          python3-dev pybind11-dev python3-pybind11 python3-torch python3-nbclient
          python3-ipykernel python3-pandas python3-matplotlib slurm-wlm munge
          libopenblas0-pthread fortunes  # fortunes: the English fortune-cookie corpus of experiments/text_lm
          strace)  # strace: tests/sim/test_rerun.py kills a run at each rename

ensure_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "halfway: installing missing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

build() {
  # CUDA sources are compiled whenever nvcc is on the PATH or in the default toolkit place.
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${CMAKE_ARGS[@]}" >/dev/null
  cmake --build "$BUILD" -j "$JOBS" ${1:+--target "$@"}  # optional: only these targets
}

# The ctest arguments of scripts/test, in CTEST_ARGS: without a selection of the caller's, the
# default set (`-LE exhaustive`); any selection of theirs (-L, -LE, -R, -I, -U, --rerun-failed,
# --tests-from-file, ... in short or long form) replaces that default, so `-L exhaustive` runs the
# exhaustive set. Name exclusions alone (-E, --exclude-regex, --exclude-from-file) keep it: they
# narrow the default set rather than widen it to hours of exhaustive runs. --no-tests=error: a
# selection that matches nothing fails instead of passing.
ctest_args() {
  local a own=0
  for a in "$@"; do
    case "$a" in
      -L* | -R* | -I* | -U | --label-regex* | --label-exclude* | --tests-regex* | \
        --tests-information* | --union | --rerun-failed | --tests-from-file*) own=1 ;;
    esac
  done
  CTEST_ARGS=(--output-on-failure --no-tests=error -j "$JOBS")
  [ "$own" -eq 1 ] || CTEST_ARGS+=(-LE "$EXCLUDE_LABELS")
  CTEST_ARGS+=("$@")
}

# Run ctest in $BUILD with scripts/test's arguments (ctest_args).
run_ctest() {
  ctest_args "$@"
  cd "$BUILD"
  ctest "${CTEST_ARGS[@]}"
}
