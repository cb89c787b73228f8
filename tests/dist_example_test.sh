#!/usr/bin/env bash
# The README's data-parallel example: `mpirun -np 2 train_mlp --dist` (the global batch split
# between 2 ranks, gradients averaged) reaches the accuracy one process reaches on the whole batch,
# and the README's 97.5%; only rank 0 prints its result and saves the model.
set -uo pipefail
mlp=$1 data=$2
accuracy() { sed -n 's/^final test accuracy \([0-9.]*\)%/\1/p' <<<"$1"; }

alone=$("$mlp" --data="$data" --save_prefix="$TEST_TMPDIR/alone") || { echo "FAIL: train_mlp: $alone"; exit 1; }
dist=$("$(dirname "$0")/mpirun_test.sh" "$mlp" --dist --data="$data" --save_prefix="$TEST_TMPDIR/dist" 2>&1) ||
  { echo "FAIL: mpirun -np 2 train_mlp --dist:"; echo "$dist"; exit 1; }
echo "one process: $(tail -1 <<<"$alone")"
echo "2 ranks: $dist" | tail -3
a=$(accuracy "$alone") d=$(accuracy "$dist")
[ "$(grep -c '^final test accuracy' <<<"$dist")" = 1 ] || { echo "FAIL: expected rank 0 alone to print its accuracy"; exit 1; }
awk -v a="$a" -v d="$d" 'BEGIN { exit !(d >= a && d >= 97.5) }' ||
  { echo "FAIL: 2 ranks reached $d%, one process $a% (README: 97.5%)"; exit 1; }
[ -s "$TEST_TMPDIR/dist.safetensors" ] && [ -s "$TEST_TMPDIR/dist.json" ] || { echo "FAIL: rank 0 saved no model"; exit 1; }
echo "dist_example_test: PASSED"
