#!/usr/bin/env bash
# Carries Open MPI's launcher to a machine that has none (the GPU machine): lays out
# OUT/mpi.tar.xz, a relocated copy of this machine's Open MPI (Debian's openmpi-bin: mpirun,
# orted, their components and PMIx's, help files, Debian's MCA defaults and default hostfile) with
# the libraries they load, without the headers and static archives that only compile against it,
# xz-compressed (one call to the GPU machine carries at most 64 MiB: tools/gpu_bundle.sh), and
# OUT/bin/mpirun, a wrapper that unpacks it on first use (into OUT/mpi, or where OUT is read-only
# into a folder of $TMPDIR; a temporary folder renamed into place, so concurrent first runs are
# safe), points Open MPI there (OPAL_PREFIX; PMIx's component path) and runs it. Ranks that
# mpirun starts inherit that environment. tools/gpu_bundle.sh calls it.
#
#   tools/mpi_bundle.sh OUT                      # here, after tools/setup.sh
#   OUT/bin/mpirun -np 2 --allow-run-as-root --oversubscribe OUT/bin/dist_bench   # there
#
# Checked here by running the copy under strace: every Open MPI and PMIx file it opened came from
# OUT/mpi (the binaries' own RUNPATH probes of /usr/lib/x86_64-linux-gnu/openmpi/lib miss there).
set -euo pipefail

out=$1
arch=x86_64-linux-gnu
ompi=/usr/lib/$arch/openmpi
pmix=/usr/lib/$arch/pmix2
[ -x /usr/bin/orterun ] && [ -d "$ompi" ] && [ -d "$pmix" ] || {
  echo "$0: Open MPI is not installed here (tools/setup.sh installs openmpi-bin)" >&2
  exit 1
}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/mpi
rm -rf "$out/mpi" "$out/mpi.tar.xz"  # and a copy an earlier run unpacked
mkdir -p "$root/bin" "$root/lib/$arch" "$root/share" "$root/etc" "$root/deps" "$out/bin"
cp /usr/bin/orterun /usr/bin/orted "$root/bin/"
ln -s orterun "$root/bin/mpirun"
cp -a "$ompi" "$pmix" "$root/lib/$arch/"
cp -a /usr/share/openmpi "$root/share/"
cp /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$root/etc/"
find "$root/lib" \( -type d \( -name include -o -name pkgconfig \) -o -name '*.a' -o -name '*.la' \) \
  -prune -exec rm -rf {} +

# The libraries the launcher and the components load, but the C runtime's and Open MPI's own.
for f in "$root"/bin/orterun "$root"/bin/orted $(find "$root/lib" -name '*.so*' -type f); do
  ldd "$f" 2>/dev/null || true
done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)[.-]' |
  grep -v -E "/$arch/(openmpi|pmix2)/" | while read -r lib; do cp -L "$lib" "$root/deps/"; done

tar -C "$stage" -cf - mpi | xz -T2 "-${WEFT_BUNDLE_XZ_LEVEL:-6}" >"$out/mpi.tar.xz"

cat >"$out/bin/mpirun" <<'WRAPPER'
#!/usr/bin/env bash
# Open MPI's mpirun from this bundle (tools/mpi_bundle.sh), for machines without Open MPI. The
# first run unpacks mpi.tar.xz (see tools/mpi_bundle.sh).
bundle=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd -P)
root=$bundle/mpi
if [ ! -w "$bundle" ]; then
  root=${TMPDIR:-/tmp}/weft-mpi-$(id -u)-$(printf '%s' "$bundle" | cksum | cut -d' ' -f1)
fi
if [ ! -d "$root" ]; then
  tmp=$(mktemp -d "$root.XXXXXX") || exit 1
  if command -v xz >/dev/null 2>&1; then
    tar -xJf "$bundle/mpi.tar.xz" -C "$tmp"
  else  # no xz-utils: Python's tarfile reads the same format
    python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
t.extraction_filter = getattr(tarfile, "tar_filter", None)
t.extractall(sys.argv[2])' "$bundle/mpi.tar.xz" "$tmp"
  fi || { rm -rf "$tmp"; echo "weft bundle: cannot unpack $bundle/mpi.tar.xz" >&2; exit 1; }
  # Another first run may have won the rename: its copy is as good.
  mv -T "$tmp/mpi" "$root" 2>/dev/null || [ -d "$root" ] ||
    { echo "weft bundle: cannot unpack into $root" >&2; exit 1; }
  rm -rf "$tmp"
fi
export OPAL_PREFIX=$root
export PMIX_PREFIX=$root/lib/x86_64-linux-gnu/pmix2
export PMIX_MCA_mca_base_component_path=$root/lib/x86_64-linux-gnu/pmix2/lib/pmix
export OMPI_MCA_mca_base_param_files=$root/etc/openmpi-mca-params.conf
# Open MPI reads its default hostfile from /etc/openmpi and fails when that file is missing.
export OMPI_MCA_orte_default_hostfile=${OMPI_MCA_orte_default_hostfile:-$root/etc/openmpi-default-hostfile}
export LD_LIBRARY_PATH=$root/lib/x86_64-linux-gnu/openmpi/lib:$root/lib/x86_64-linux-gnu/pmix2/lib:$root/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec "$root/bin/orterun" "$@"
WRAPPER
chmod +x "$out/bin/mpirun"
