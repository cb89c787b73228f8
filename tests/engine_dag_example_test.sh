#!/usr/bin/env bash
# The main example runs, prints every op it pushed, and classifies the held-out digits well;
# given a malformed data file it fails with a clear message, not a crash.
set -euo pipefail
bin="$1"
data="$2"

out=$("$bin" --data="$data")
echo "$out"
for op in load 'class_mean\[0\]' 'class_mean\[9\]' evaluate; do
  grep -qE "^[0-9]+ +$op " <<<"$out" || { echo "FAIL: op $op not listed"; exit 1; }
done
acc=$(echo "$out" | sed -n 's/.*held-out digits: \([0-9.]*\)%.*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 85.0) }' || { echo "FAIL: accuracy $acc% < 85%"; exit 1; }

bad="$TEST_TMPDIR/bad.csv"
printf '1,2,3\n' > "$bad"
if err=$("$bin" --data="$bad" 2>&1); then echo "FAIL: a malformed file was accepted"; exit 1; fi
grep -q "bad.csv:1: expected 65 fields" <<<"$err" || { echo "FAIL: unclear error: $err"; exit 1; }
if err=$("$bin" --nope=1 2>&1); then echo "FAIL: an unknown flag was accepted"; exit 1; fi
grep -q "unknown flag --nope" <<<"$err" || { echo "FAIL: unclear error: $err"; exit 1; }
echo PASS
