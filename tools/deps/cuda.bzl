"""Finds the CUDA toolkit for --config=cuda.

The toolkit's location is $WEFT_CUDA_PATH, or /usr/local/cuda. Its headers and libraries are
exposed as @cuda//:cuda. Where no toolkit is found the target still exists but fails to build
with a message that says where it looked, so the CPU-only build never depends on CUDA.
"""

_CUDA_BUILD = """
cc_library(
    name = "cuda",
    hdrs = glob(["include/*.h", "include/*.hpp", "include/crt/**", "include/nv/**"]),
    includes = ["include"],
    linkopts = [
        "-L{lib}",
        "-Wl,-rpath,{lib}",
        "-lcudart",
        "-lnvrtc",
        "-lcublas",
        "-lcublasLt",
        "-lcudnn",
    ],
    visibility = ["//visibility:public"],
)
"""

_MISSING_BUILD = """
genrule(
    name = "missing",
    outs = ["missing.h"],
    cmd = "echo 'weft: no CUDA toolkit at {path} (set WEFT_CUDA_PATH)' >&2; exit 1",
)

cc_library(
    name = "cuda",
    hdrs = [":missing.h"],
    visibility = ["//visibility:public"],
)
"""

def _cuda_configure_impl(rctx):
    path = rctx.os.environ.get("WEFT_CUDA_PATH", "/usr/local/cuda")
    if rctx.path(path + "/include/cuda_runtime.h").exists:
        lib = path + "/lib64"
        rctx.symlink(path + "/include", "include")
        rctx.file("BUILD", _CUDA_BUILD.format(lib = lib))
    else:
        rctx.file("BUILD", _MISSING_BUILD.format(path = path))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["WEFT_CUDA_PATH"],
    local = True,
)

def if_cuda(if_true, if_false = []):
    """`if_true` in a --config=cuda build, else `if_false` (GPU targets are empty without it)."""
    return select({
        "//tools/deps:cuda_enabled": if_true,
        "//conditions:default": if_false,
    })
