#!/usr/bin/env bash
# Configures, builds and runs tests/package/subdir: a consumer that vendors halfway's source
# tree with add_subdirectory.
# Built unoptimised (Debug): the test is about the build's shape, and -O0 compiles in a third
# of the time.
set -euo pipefail
root="$1"; scratch="$2"
rm -rf "$scratch"
mkdir -p "$scratch"
log="$scratch/build.log"
if ! { cmake -S "$root/tests/package/subdir" -B "$scratch/build" -DCMAKE_BUILD_TYPE=Debug \
         -DHALFWAY_SOURCE_DIR="$root" &&
       cmake --build "$scratch/build" -j 2; } >"$log" 2>&1; then
  tail -n 30 "$log" >&2
  exit 1
fi
"$scratch/build/consumer"
