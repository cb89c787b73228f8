"""Finds MPI (Debian's OpenMPI: openmpi-bin, libopenmpi-dev) for //distributed.

Its headers are not on the compiler's default search path (mpi.h is under
/usr/lib/x86_64-linux-gnu/openmpi/include), so they are linked into this repository and exposed as
@mpi//:mpi with the flags `mpicc --showme` gives. $WEFT_MPI_CC names another wrapper compiler
(default: mpicc on the PATH). Where none is found the target still exists but fails to build with
a message saying what to install, so only the targets that use MPI need it.
"""

_MPI_BUILD = """
cc_library(
    name = "mpi",
    hdrs = glob(["include/**/*.h"]),
    # The C API only: OpenMPI's and MPICH's mpi.h pull in their deprecated C++ bindings otherwise.
    defines = ["OMPI_SKIP_MPICXX=1", "MPICH_SKIP_MPICXX=1"],
    includes = {includes},
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
"""

_MISSING_BUILD = """
genrule(
    name = "missing",
    outs = ["missing.h"],
    cmd = "echo 'weft: no MPI found ({why}); run tools/setup.sh (openmpi-bin, libopenmpi-dev)' >&2; exit 1",
)

cc_library(
    name = "mpi",
    hdrs = [":missing.h"],
    visibility = ["//visibility:public"],
)
"""

def _showme(rctx, cc, what):
    result = rctx.execute([cc, "--showme:" + what])
    if result.return_code != 0:
        return None
    return result.stdout.strip().split(" ")

def _mpi_configure_impl(rctx):
    cc = rctx.os.environ.get("WEFT_MPI_CC", "mpicc")
    path = rctx.which(cc) if "/" not in cc else rctx.path(cc)
    incdirs = _showme(rctx, str(path), "incdirs") if path else None
    link = _showme(rctx, str(path), "link") if path else None
    if not incdirs or not link or not rctx.path(incdirs[0] + "/mpi.h").exists:
        rctx.file("BUILD", _MISSING_BUILD.format(why = "no " + cc + " with mpi.h"))
        return
    includes = []
    for i, d in enumerate(incdirs):
        rctx.symlink(d, "include/%d" % i)
        includes.append("include/%d" % i)
    libdirs = [f[2:] for f in link if f.startswith("-L")]
    linkopts = link + ["-Wl,-rpath," + d for d in libdirs]
    rctx.file("BUILD", _MPI_BUILD.format(includes = repr(includes), linkopts = repr(linkopts)))

mpi_configure = repository_rule(
    implementation = _mpi_configure_impl,
    environ = ["WEFT_MPI_CC", "PATH"],
    local = True,
)
