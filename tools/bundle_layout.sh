#!/usr/bin/env bash
# Lays out a bundle of binaries that runs on another machine, from any folder and in any order
# (tools/gpu_bundle.sh makes the GPU bundle with it):
#
#   OUT/bin/NAME        a wrapper per binary: the one to run, from anywhere (also through a symlink)
#   OUT/libexec/NAME    the binary; OUT/libexec/NAME.runfiles -> runfiles, the data files it looks
#                       for beside itself as under Bazel (examples/data/digits.csv, bench/*.py)
#   OUT/libexec/env.sh  what each wrapper sources first: decompresses OUT/lib/*.xz on first use
#                       (atomically; concurrent first runs are safe) and puts the libraries on
#                       LD_LIBRARY_PATH
#   OUT/lib/            the shared libraries the binaries need that are neither the C and C++
#                       runtimes nor CUDA's (the machine brings those): weft's own where the
#                       binaries link it dynamically (Bazel's _solib_* libraries, one copy for all
#                       binaries), oneDNN and the like; those over 1 MiB xz-compressed
#
# Executables lose their symbol tables (strip --strip-all) and weft's libraries all but their
# dynamic symbols (--strip-unneeded), so a backtrace through weft still names its functions. The
# layout fails if a library a binary needs is neither in OUT/lib nor one the machine brings.
#
#   tools/bundle_layout.sh OUT [--data=PATH]... [--env=NAME:KEY=VALUE]... BINARY...
#
# PATH is relative to the current folder, and to the runfiles (the workspace root, or a test's
# runfiles). --env: the wrapper of binary NAME exports KEY=VALUE, as `bazel test` sets a test's
# env attribute (gpu_device_error_naive_test's WEFT_ENGINE=naive). WEFT_BUNDLE_XZ_LEVEL sets the
# compression (default 6; 0 is fastest).
set -euo pipefail

out=$1
shift
data=() envs=()
while [ $# -gt 0 ]; do
  case $1 in
    --data=*) data+=("${1#--data=}") ;;
    --env=*) envs+=("${1#--env=}") ;;
    *) break ;;
  esac
  shift
done
[ $# -gt 0 ] || { echo "usage: $0 OUT [--data=PATH]... [--env=NAME:KEY=VALUE]... BINARY..." >&2; exit 2; }

mkdir -p "$out/bin" "$out/libexec/runfiles/weft" "$out/lib"
for f in "${data[@]}"; do
  mkdir -p "$out/libexec/runfiles/weft/$(dirname "$f")"
  cp -L "$f" "$out/libexec/runfiles/weft/$f"
done

elves=()
for path in "$@"; do
  name=$(basename "$path")
  cp -L "$path" "$out/libexec/$name"
  chmod u+w "$out/libexec/$name"
  case "$(head -c 4 "$path" | od -An -c | tr -d ' ')" in
    177ELF) strip --strip-all "$out/libexec/$name" && elves+=("$path") ;;
  esac
  ln -sfn runfiles "$out/libexec/$name.runfiles"
  exports=""
  for e in "${envs[@]}"; do
    [ "${e%%:*}" = "$name" ] && exports+="export $(printf '%q' "${e#*:}")"$'\n'
  done
  cat >"$out/bin/$name" <<WRAPPER
#!/usr/bin/env bash
# Runs libexec/$name with this bundle's libraries, from any folder (see libexec/env.sh).
here=\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")
source "\$here/../libexec/env.sh" || exit 1
${exports}exec "\$here/../libexec/$name" "\$@"
WRAPPER
  chmod +x "$out/bin/$name"
done

# Shared libraries that are neither the C and C++ runtimes nor the CUDA toolkit's. ldd reads the
# binaries where they were built: a dynamically linked Bazel binary finds weft's libraries through
# its RUNPATH ($ORIGIN/../_solib_k8), which resolves there and not in OUT/libexec.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda|libcudart|libnvrtc|libcublas|libcudnn|libnvJitLink)'
needed=$(for bin in "${elves[@]}"; do ldd "$bin" || true; done)
if grep -q 'not found' <<<"$needed"; then
  echo "$0: a library the binaries need is not found here:" >&2
  grep 'not found' <<<"$needed" | sort -u >&2
  exit 1
fi
awk '$3 ~ /^\// {print $1, $3}' <<<"$needed" | sort -u -k1,1 | while read -r name path; do
  [[ ! "$name" =~ $skip ]] || continue
  cp -L "$path" "$out/lib/$name"
  case $path in
    */_solib_*/*) chmod u+w "$out/lib/$name" && strip --strip-unneeded "$out/lib/$name" ;;
  esac
done
# Compress the large ones (oneDNN is most of what is left).
find "$out/lib" -maxdepth 1 -type f -size +1M ! -name '*.xz' -exec xz -T2 "-${WEFT_BUNDLE_XZ_LEVEL:-6}" {} +

cat >"$out/libexec/env.sh" <<'ENV'
# Sourced by the bundle's wrappers (bin/*) and run_tests.sh. Makes lib/ usable whatever runs
# first and from whichever folder: each lib/NAME.xz is decompressed once, to a temporary file
# renamed into place (so a concurrent first run never sees half a library), into lib/, or when
# the bundle is read-only into a folder of $TMPDIR; those folders go first on LD_LIBRARY_PATH.
weft_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)

weft_bundle_unpack() {  # weft_bundle_unpack LIB.xz DIR
  local so="$2/$(basename "${1%.xz}")" tmp
  [ -e "$so" ] && return 0
  tmp=$(mktemp "$so.XXXXXX") || return 1
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$1" >"$tmp"
  else  # no xz-utils: Python's lzma reads the same format
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1" >"$tmp"
  fi && chmod 755 "$tmp" && mv -f "$tmp" "$so" && return 0
  rm -f "$tmp"
  echo "weft bundle: cannot decompress $1 into $2" >&2
  return 1
}

weft_bundle_libs=$weft_bundle/lib
if [ ! -w "$weft_bundle_libs" ]; then
  weft_bundle_libs=${TMPDIR:-/tmp}/weft-bundle-$(id -u)-$(printf '%s' "$weft_bundle" | cksum | cut -d' ' -f1)
  mkdir -p "$weft_bundle_libs" || return 1
fi
for weft_xz in "$weft_bundle"/lib/*.xz; do
  [ -e "$weft_xz" ] || continue
  weft_bundle_unpack "$weft_xz" "$weft_bundle_libs" || return 1
done
[ "$weft_bundle_libs" = "$weft_bundle/lib" ] || weft_bundle_libs="$weft_bundle_libs:$weft_bundle/lib"
export LD_LIBRARY_PATH="$weft_bundle_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset weft_xz weft_bundle_libs
# NCCL (dlopened by distributed/gpu/nccl_lib.cc) is not carried (200 MB): where the system's loader does
# not know libnccl.so.2, PyTorch's copy (site-packages/nvidia/nccl/lib) is used, found through
# $WEFT_PEER_PYTHON or python3. WEFT_NCCL_LIB, when set, wins.
if [ -z "${WEFT_NCCL_LIB:-}" ] && ! grep -q 'libnccl\.so\.2' <<<"$(ldconfig -p 2>/dev/null)"; then
  for weft_py in "${WEFT_PEER_PYTHON:-}" python3; do
    [ -n "$weft_py" ] || continue
    weft_nccl=$("$weft_py" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' \
      2>/dev/null) || continue
    if [ -e "$weft_nccl/libnccl.so.2" ]; then
      export WEFT_NCCL_LIB="$weft_nccl"
      break
    fi
  done
  unset weft_py weft_nccl
fi
ENV
