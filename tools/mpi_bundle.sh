#!/usr/bin/env bash
# Carries Open MPI's launcher to a machine that has none (the GPU machine): lays out OUT/mpi/, a
# relocated copy of this machine's Open MPI (Debian's openmpi-bin: mpirun, orted, their
# components and PMIx's, help files, Debian's MCA defaults and default hostfile) with the
# libraries they load, and
# OUT/bin/mpirun, a wrapper that points Open MPI there (OPAL_PREFIX; PMIx's component path) and
# runs it. Ranks that mpirun starts inherit that environment. tools/gpu_bundle.sh calls it.
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
root=$out/mpi
rm -rf "$root"
mkdir -p "$root/bin" "$root/lib/$arch" "$root/share" "$root/etc" "$root/deps" "$out/bin"
cp /usr/bin/orterun /usr/bin/orted "$root/bin/"
ln -s orterun "$root/bin/mpirun"
cp -a "$ompi" "$pmix" "$root/lib/$arch/"
cp -a /usr/share/openmpi "$root/share/"
cp /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$root/etc/"

# The libraries the launcher and the components load, but the C runtime's and Open MPI's own.
for f in "$root"/bin/orterun "$root"/bin/orted $(find "$root/lib" -name '*.so*' -type f); do
  ldd "$f" 2>/dev/null || true
done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)[.-]' |
  grep -v -E "/$arch/(openmpi|pmix2)/" | while read -r lib; do cp -L "$lib" "$root/deps/"; done

cat >"$out/bin/mpirun" <<'WRAPPER'
#!/usr/bin/env bash
# Open MPI's mpirun from this bundle (tools/mpi_bundle.sh), for machines without Open MPI.
root=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../mpi" && pwd -P)
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
