#!/bin/bash
# sim/src/gelu_erf_table.hpp is what scripts/gen_gelu_erf_table.py writes, byte for byte.
# usage: check_gelu_table.sh <python> <source dir>; 77 (skipped) without mpmath.
py=$1 src=$2
"$py" -c "import mpmath" 2>/dev/null || { echo "skipped: $py has no mpmath"; exit 77; }
diff <("$py" "$src/scripts/gen_gelu_erf_table.py") "$src/sim/src/gelu_erf_table.hpp" >&2 \
  || { echo "sim/src/gelu_erf_table.hpp differs from the generator's output" >&2; exit 1; }
echo "gelu_erf_table.hpp: as generated"
