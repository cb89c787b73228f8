#!/usr/bin/env bash
# The Open MPI launcher the GPU bundle carries (tools/mpi_bundle.sh), as on a machine without
# Open MPI: in a private mount namespace whose Open MPI and PMIx folders (/usr/lib/<arch>/openmpi,
# /usr/lib/<arch>/pmix2, /etc/openmpi, /usr/share/openmpi) are empty, the bundle's mpirun unpacks
# its compressed copy on this first run and starts 2 ranks of dist_mpi_test_bin (collectives
# against their definitions, the 2-rank trainer), and they pass. Without the right to make a
# mount namespace it runs with the system's folders in place, and says so.
# Arguments: tools/mpi_bundle.sh, dist_mpi_test_bin (runfiles paths).
set -euo pipefail
bundler=$(readlink -f "$1") binary=$(readlink -f "$2")
fail() { echo "FAIL: $*" >&2; exit 1; }

bundle=$TEST_TMPDIR/mpibundle
WEFT_BUNDLE_XZ_LEVEL=0 "$bundler" "$bundle"
[ -x "$bundle/bin/mpirun" ] && [ -e "$bundle/mpi.tar.xz" ] || fail "no launcher in $(ls -R "$bundle" | head)"
[ ! -e "$bundle/mpi" ] || fail "Open MPI unpacked before any run"

# Under --config=asan the ranks run without LeakSanitizer, as tests/mpirun_test.sh says why.
asan=()
if [ -n "${ASAN_OPTIONS:-}" ]; then asan=(ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"); fi
run=(env -i PATH=/usr/bin:/bin HOME="$TEST_TMPDIR" WEFT_CPU_WORKERS=1 "${asan[@]}" "$bundle/bin/mpirun" -np 2 --allow-run-as-root
     --oversubscribe --bind-to none "$binary" --gtest_brief=1 --gtest_filter='DistMpi.AllReduce*:DistMpi.Broadcast*:DistMpi.TwoRanksStay*')
arch=x86_64-linux-gnu
hide="for d in /usr/lib/$arch/openmpi /usr/lib/$arch/pmix2 /etc/openmpi /usr/share/openmpi; do mount -t tmpfs none \$d; done"
if unshare -m true 2>/dev/null; then
  out=$(unshare -m bash -c "$hide && ls /usr/lib/$arch/openmpi | wc -l && exec \"\$@\"" hide "${run[@]}" 2>&1) ||
    fail "the bundled mpirun failed with Open MPI hidden: $out"
  [ "$(echo "$out" | head -1)" = 0 ] || fail "Open MPI's folder was not hidden: $out"
else
  echo "no mount namespace here: the bundled mpirun runs with the system's Open MPI in place"
  out=$("${run[@]}" 2>&1) || fail "the bundled mpirun failed: $out"
fi
[ "$(echo "$out" | grep -c "dist_mpi_test: rank [01] of 2 (mpi)")" = 2 ] || fail "not 2 MPI ranks: $out"
grep -q FAILED <<<"$out" && fail "a rank failed: $out"
[ -x "$bundle/mpi/bin/orterun" ] || fail "Open MPI not unpacked by the first run: $(ls "$bundle")"
[ "$(ls "$bundle" | tr '\n' ' ')" = "bin mpi mpi.tar.xz " ] || fail "a temporary folder left: $(ls "$bundle")"
echo "PASS"
