#!/usr/bin/env bash
# A stranger's build: a workspace outside the repository, made from tests/outside_workspace/ with
# exactly the WORKSPACE and .bazelrc lines of the README's "Embedding weft" section, builds a
# training program against @weft//weft with an inner Bazel and nothing else (none of weft's rc
# files, no home rc; the machine's system rc, which Debian's Bazel needs, is read), runs it and
# checks what it prints, then runs the same program as a test.
#
# The inner Bazel keeps its output base in $WEFT_OUTSIDE_TEST_CACHE (default: a folder of /tmp per
# user and checkout, outside the test's temporary folder so that it lasts), so only the first run
# builds weft's libraries; with WEFT_BAZEL_DISK_CACHE set (see .bazelrc) it also uses that disk
# cache.
# Arguments: README.md, then the template files (runfiles paths).
set -euo pipefail
readme=$1
shift
fail() { echo "FAIL: $*" >&2; exit 1; }

# The checkout under test: where the README in the runfiles links to (the test runs unsandboxed).
weft=$(dirname "$(readlink -f "$readme")")
[ -f "$weft/WORKSPACE" ] || fail "no weft checkout at $weft"

# Every line of the templates' WORKSPACE and .bazelrc is in the README's embedding section.
section=$(sed -n '/^## Embedding weft/,/^## /p' "$readme")
for template in "$@"; do
  case "$template" in *WORKSPACE.in | *bazelrc.in) ;; *) continue ;; esac
  while IFS= read -r line; do
    [ -z "$line" ] || grep -qxF -- "$line" <<<"$section" ||
      fail "README's 'Embedding weft' lacks this line of $(basename "$template"): $line"
  done <"$template"
done

cache=${WEFT_OUTSIDE_TEST_CACHE:-/tmp/weft-outside-workspace-$(id -u)-$(printf '%s' "$weft" | cksum | cut -d' ' -f1)}
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9  # one inner build at a time per cache

ws=$cache/stranger
rm -rf "$ws" && mkdir -p "$ws"
for template in "$@"; do
  name=$(basename "$template" .in)
  [ "$name" = bazelrc ] && name=.bazelrc
  sed "s|/path/to/weft|$weft|g" "$template" >"$ws/$name"
done

bazel_flags=(--noshow_progress --color=no --sandbox_debug=false)
if [ -n "${WEFT_BAZEL_DISK_CACHE:-}" ] && [ -d "$WEFT_BAZEL_DISK_CACHE" ]; then
  bazel_flags+=(--disk_cache="$WEFT_BAZEL_DISK_CACHE")
fi
# Its output indented, so that its "//:train_test PASSED" is not read as one of weft's results.
inner_bazel() {
  (cd "$ws" && env -u TEST_TMPDIR -u TEST_SRCDIR -u RUNFILES_DIR -u RUNFILES_MANIFEST_FILE \
    bazel --batch --nohome_rc --output_user_root="$cache/root" "$@" 2>&1) | sed 's/^/    /'
  return "${PIPESTATUS[0]}"
}
inner_bazel build "${bazel_flags[@]}" //:train || fail "the outside workspace does not build"
out=$(cd "$ws" && ./bazel-bin/train) || fail "train failed: $out"
echo "$out"
for what in trained reloaded; do
  accuracy=$(sed -n "s/^$what accuracy //p" <<<"$out")
  awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.95) }' || fail "$what accuracy '$accuracy', expected at least 0.95"
done
inner_bazel test "${bazel_flags[@]}" --test_output=errors //:train_test || fail "the outside workspace's test failed"
echo "PASS"
