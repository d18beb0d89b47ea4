# Shared set-up for scripts/demo and scripts/test: install missing Debian packages, the Python
# environment (.venv), configure, build, and run CTest. Sourced, not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HALFWAY_BUILD_DIR:-$ROOT/build}"
CMAKE_ARGS=()       # more cmake options for build (scripts/test --sanitize, scripts/fuzz)
# The labels (a regex) of the tests that the default set leaves out: `exhaustive` (hours) and
# `slow` (minutes each: python_wheel builds the extension again, about 3 minutes on 2 cores).
EXCLUDE_LABELS='^(exhaustive|slow)$'
JOBS="$(nproc 2>/dev/null || echo 2)"
# The Python environment: Debian's interpreter with python/requirements.txt's pinned packages.
VENV="${HALFWAY_VENV:-$ROOT/.venv}"
REQUIREMENTS="$ROOT/python/requirements.txt"
# Every file of requirements.txt, once downloaded (checked against its hash), so that a new
# clone or a new requirements.txt installs without the network for what is already there.
WHEELHOUSE="${HALFWAY_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/halfway/wheels}"

# Debian packages the build and the tests need (Debian 12).
PACKAGES=(build-essential cmake libboost-dev libfmt-dev catch2 libcli11-dev libtomlplusplus-dev
          nlohmann-json3-dev libhwy-dev python3-numpy libzip-dev
          python3-dev python3-venv pybind11-dev python3-pandas python3-matplotlib slurm-wlm munge
          libopenblas0-pthread fortunes  # fortunes: the English fortune-cookie corpus of experiments/text_lm
          strace  # strace: tests/sim/test_rerun.py kills a run at each rename
          python3-torch)  # Debian's torch 1.13: the torch-cpu model's calibration test (sim_torch_cpu_bf16)

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

# .venv from Debian's /usr/bin/python3 (not whichever python3 comes first on the PATH) with
# exactly the pins of python/requirements.txt. The stamp holds the hash of the requirements it
# was made from: an up-to-date environment is left alone, a stale one is made again from
# nothing, so no package of an older pin stays behind.
ensure_venv() {
  local stamp="$VENV/.requirements.sha256" want
  want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
  [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return 0
  echo "halfway: installing the Python environment $VENV (python/requirements.txt)"
  local start; start=$(date +%s)
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV"
  local install=("$VENV/bin/pip" install --quiet --no-deps --require-hashes --no-index
                 --find-links "$WHEELHOUSE" -r "$REQUIREMENTS")
  if ! "${install[@]}" 2>/dev/null; then
    "$VENV/bin/pip" download --quiet --no-deps --require-hashes --dest "$WHEELHOUSE" \
      -r "$REQUIREMENTS"
    "${install[@]}"
  fi
  echo "$want" > "$stamp"
  echo "halfway: Python environment ready in $(( $(date +%s) - start )) s" \
       "($(du -sh "$VENV" | cut -f1))"
}

# SoftFloat 3e (John R. Hauser's, BSD licence), the reference of `halfway bench`'s scalar rows:
# SoftFloat Release 3e's headers and its prebuilt x86-64 archive come in the sdist of sfpy,
# pinned by hash in python/bench-requirements.txt, kept in the wheelhouse and unpacked into
# $BUILD/softfloat; CMAKE_ARGS gets -DHALFWAY_SOFTFLOAT_DIR. Optional: where it cannot be had
# (no network, not x86-64) the build goes on without it, after one line saying so, and does not
# try again until $BUILD/softfloat/unavailable is removed.
ensure_softfloat() {
  local dest="$BUILD/softfloat" reqs="$ROOT/python/bench-requirements.txt"
  if [ ! -f "$dest/lib/softfloat.a" ]; then
    [ -f "$dest/unavailable" ] && return 0
    mkdir -p "$dest"
    local why="" version sdist tmp
    version="$(sed -n 's/^sfpy==\([^ ]*\).*/\1/p' "$reqs")"
    sdist="$WHEELHOUSE/sfpy-$version.tar.gz"
    local get=("$VENV/bin/pip" download --quiet --no-deps --require-hashes --no-binary :all:
               --dest "$WHEELHOUSE" -r "$reqs")
    if [ "$(uname -m)" != x86_64 ]; then
      why="its prebuilt archive is for x86-64"
    elif ! "${get[@]}" --no-index --find-links "$WHEELHOUSE" >/dev/null 2>&1 &&
         ! "${get[@]}" --retries 1 --timeout 20 >/dev/null 2>&1; then
      why="the sfpy $version sdist could not be downloaded"
    else
      tmp="$(mktemp -d)"
      if tar -xzf "$sdist" -C "$tmp" "sfpy-$version/sfpy/include/softfloat.h" \
           "sfpy-$version/sfpy/include/softfloat_types.h" "sfpy-$version/sfpy/lib/softfloat.a"; then
        mkdir -p "$dest/include" "$dest/lib"
        cp "$tmp/sfpy-$version/sfpy/include/"softfloat*.h "$dest/include/"
        cp "$tmp/sfpy-$version/sfpy/lib/softfloat.a" "$dest/lib/"
      else
        why="the sfpy $version sdist did not hold SoftFloat's headers and archive"
      fi
      rm -rf "$tmp"
    fi
    if [ -n "$why" ]; then
      echo "halfway: building without SoftFloat 3e ($why): bench's scalar rows print our times alone"
      touch "$dest/unavailable"
      return 0
    fi
  fi
  CMAKE_ARGS+=(-DHALFWAY_SOFTFLOAT_DIR="$dest")
}

build() {
  ensure_softfloat
  # CUDA sources are compiled whenever nvcc is on the PATH or in the default toolkit place.
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$VENV/bin/python" \
    "${CMAKE_ARGS[@]}" >/dev/null
  cmake --build "$BUILD" -j "$JOBS" ${1:+--target "$@"}  # optional: only these targets
}

# The ctest arguments of scripts/test, in CTEST_ARGS: without a selection of the caller's, the
# default set (`-LE '^(exhaustive|slow)$'`); any selection of theirs (-L, -LE, -R, -I, -U, --rerun-failed,
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
