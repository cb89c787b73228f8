"""Finds the CUDA toolkit for --config=cuda.

The toolkit's location is $WEFT_CUDA_PATH, or /usr/local/cuda. Its headers and libraries are
exposed as @cuda//:cuda, and CUPTI (the profiler's device tracer, engine/gpu/device_tracer.cc) as
@cuda//:cupti. Where no toolkit is found the targets still exist but fail to build with a message
that says where they looked, so the CPU-only build never depends on CUDA.
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

# CUPTI's activity API. Its headers are in include/ with the others (older toolkits keep them in
# extras/CUPTI, linked to cupti_include/).
cc_library(
    name = "cupti",
    hdrs = glob(["cupti_include/*.h"]),
    includes = ["cupti_include"],
    linkopts = [
        "-L{cupti_lib}",
        "-Wl,-rpath,{cupti_lib}",
        "-lcupti",
    ],
    visibility = ["//visibility:public"],
    deps = [":cuda"],
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

cc_library(
    name = "cupti",
    hdrs = [":missing.h"],
    visibility = ["//visibility:public"],
)
"""

def _cuda_configure_impl(rctx):
    path = rctx.os.environ.get("WEFT_CUDA_PATH", "/usr/local/cuda")
    if rctx.path(path + "/include/cuda_runtime.h").exists:
        lib = path + "/lib64"
        rctx.symlink(path + "/include", "include")
        cupti = path + "/extras/CUPTI"
        if rctx.path(path + "/include/cupti.h").exists or not rctx.path(cupti + "/include/cupti.h").exists:
            cupti_lib = lib
            rctx.file("cupti_include/README", "CUPTI's headers are in include/.\n")
        else:
            cupti_lib = cupti + "/lib64"
            rctx.symlink(cupti + "/include", "cupti_include")
        rctx.file("BUILD", _CUDA_BUILD.format(lib = lib, cupti_lib = cupti_lib))
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
