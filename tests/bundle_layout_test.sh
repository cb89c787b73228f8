#!/usr/bin/env bash
# The layout of the GPU bundle (tools/bundle_layout.sh), on CPU binaries: every binary runs
# through its wrapper from any folder (also through a symlink) and in any order; the libraries of
# a dynamically linked one (bundle_probe) are carried; the compressed libraries are unpacked on
# first use and put on LD_LIBRARY_PATH; a binary finds its data (train_mlp: the digits) and
# bench's peer script beside itself.
# Arguments: tools/bundle_layout.sh, train_mlp, bundle_probe (runfiles paths).
set -euo pipefail
layout=$(readlink -f "$1") mlp=$(readlink -f "$2") probe=$(readlink -f "$3")
fail() { echo "FAIL: $*" >&2; exit 1; }

bundle=$TEST_TMPDIR/bundle
# As on another machine: no runfiles of this test to fall back on.
unset RUNFILES_DIR RUNFILES_MANIFEST_FILE JAVA_RUNFILES TEST_SRCDIR
WEFT_BUNDLE_XZ_LEVEL=0 "$layout" "$bundle" --data=examples/data/digits.csv --data=bench/torch_gpu_peer.py \
  "$mlp" "$probe"
[ -x "$bundle/bin/train_mlp" ] && [ -x "$bundle/bin/bundle_probe" ] || fail "no wrappers: $(ls "$bundle/bin")"
[ -e "$bundle/lib/libdnnl.so.2.xz" ] || fail "oneDNN not bundled compressed: $(ls "$bundle/lib")"
[ ! -e "$bundle/lib/libdnnl.so.2" ] || fail "oneDNN decompressed before any run"
! grep -qE '^lib(c|m|stdc\+\+|gcc_s)\.so' <<<"$(ls "$bundle/lib")" || fail "C/C++ runtime bundled: $(ls "$bundle/lib")"
# The probe's own library, from Bazel's _solib folder (its RUNPATH, which misses in libexec/).
solib=$(ldd "$probe" | awk '$3 ~ /\/_solib_/ {print $1}')
[ -n "$solib" ] || fail "bundle_probe is not linked to a library in Bazel's _solib folder: $(ldd "$probe")"
for name in $solib; do
  [ -e "$bundle/lib/$name" ] || [ -e "$bundle/lib/$name.xz" ] || fail "$name not bundled: $(ls "$bundle/lib")"
done

# First run: train_mlp, from an unrelated folder, with no data flag; it finds the bundle's digits.
elsewhere=$TEST_TMPDIR/elsewhere
mkdir -p "$elsewhere"
cd "$elsewhere"
out=$("$bundle/bin/train_mlp" --epochs=1 --save_prefix=mlp) || fail "train_mlp failed: $out"
grep -q "^1437 training and 360 test samples" <<<"$out" || fail "train_mlp did not read the digits: $out"
[ -e "$bundle/lib/libdnnl.so.2" ] || fail "oneDNN not decompressed by the first run"
[ -e "$elsewhere/mlp.safetensors" ] || fail "train_mlp did not save in the current folder"
grep -q '\.so\.[0-9]*\.[A-Za-z0-9]\{6\}$' <<<"$(ls "$bundle/lib")" && fail "a temporary file left in lib/: $(ls "$bundle/lib")"

# Then the probe, through a symlink from yet another folder.
mkdir -p "$TEST_TMPDIR/links" && ln -s "$bundle/bin/bundle_probe" "$TEST_TMPDIR/links/probe"
cd /
out=$("$TEST_TMPDIR/links/probe") || fail "probe failed: $out"
grep -qF "peer script: $bundle/libexec/bundle_probe.runfiles/weft/bench/torch_gpu_peer.py" <<<"$out" ||
  fail "the peer script is not found beside the binary: $out"
libs=$(echo "$out" | sed -n 's/^LD_LIBRARY_PATH: //p')
[[ ":$libs:" == *":$bundle/lib:"* ]] || fail "lib/ not on LD_LIBRARY_PATH: $out"

# In the other order on a fresh unpack: the probe first, then train_mlp.
rm -f "$bundle/lib/libdnnl.so.2"
"$bundle/bin/bundle_probe" >/dev/null || fail "probe failed on a fresh bundle"
[ -e "$bundle/lib/libdnnl.so.2" ] || fail "oneDNN not decompressed when the probe ran first"
system_dnnl=$(ldd "$mlp" | awk '$1 == "libdnnl.so.2" {print $3}')
cmp -s "$bundle/lib/libdnnl.so.2" "$system_dnnl" || fail "oneDNN unpacked wrong"
"$bundle/bin/train_mlp" --epochs=1 --save_prefix= >/dev/null || fail "train_mlp failed after the probe"
echo "PASS"
