"""GPU tests: tagged "gpu", and built from their sources only under --config=cuda.

Without --config=cuda the target still exists and reports one skipped test saying so; with it but
without a usable GPU, tests/gpu_test_main.cc skips every test with the reason.
"""

load("//tools/bazel:cc.bzl", "cc_test")
load("//tools/deps:cuda.bzl", "if_cuda")

def weft_gpu_test(name, srcs, deps = [], size = "medium", **kwargs):
    cc_test(
        name = name,
        size = size,
        srcs = if_cuda(srcs, ["gpu_not_built_test.cc"]),
        tags = ["gpu"],
        deps = if_cuda(deps + [":gpu_test_main", "//core/gpu", "@cuda"], ["//tools/deps:gtest_main"]),
        **kwargs
    )
