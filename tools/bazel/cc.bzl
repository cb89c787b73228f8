"""weft's C++ rules: Bazel's native cc_library, cc_binary and cc_test with the flags weft's code needs.

Every BUILD file of weft loads these under the native names:

    load("//tools/bazel:cc.bzl", "cc_binary", "cc_library", "cc_test")

The flags are on weft's own targets, not only in weft's .bazelrc, so a workspace that depends on
@weft//weft compiles weft the way weft does with nothing in its own .bazelrc. They do not reach the
embedder's targets (Bazel propagates no copts): code that includes weft's headers needs C++20 too,
which the README's "Embedding weft" section says how to ask for.
"""

# What weft's sources cannot build or run well without: C++20 (the default toolchain says
# -std=c++0x; a target's copts come after it and win), and `#pragma omp simd` honoured in the
# kernel loops (ops/cpu/internal/cpu_util.h) without linking an OpenMP runtime.
WEFT_COPTS = [
    "-std=c++20",
    "-fopenmp-simd",
]

def cc_library(copts = [], **kwargs):
    native.cc_library(copts = WEFT_COPTS + copts, **kwargs)

def cc_binary(copts = [], **kwargs):
    native.cc_binary(copts = WEFT_COPTS + copts, **kwargs)

def cc_test(copts = [], **kwargs):
    native.cc_test(copts = WEFT_COPTS + copts, **kwargs)
