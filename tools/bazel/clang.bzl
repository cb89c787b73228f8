"""The clang toolchain of --config=fuzz: Bazel's own C++ autoconfiguration, run for clang.

    clang_configure(name = "local_config_clang")   # in WORKSPACE; fetched only by --config=fuzz
    build:fuzz --crosstool_top=@local_config_clang//:toolchain

The compiler is $WEFT_CLANG, or Debian 12's clang-14 (tools/setup.sh --fuzz installs it with
libFuzzer). The default toolchain (@local_config_cc, gcc) is left as it is, so switching between
the fuzz build and the others reconfigures nothing.
"""

load("@bazel_tools//tools/cpp:cc_configure.bzl", "cc_autoconf_impl")

def _clang_configure_impl(rctx):
    name = rctx.os.environ.get("WEFT_CLANG", "clang-14")
    clang = rctx.which(name) if not name.startswith("/") else rctx.path(name)
    if clang == None or not clang.exists:
        fail("weft: --config=fuzz needs clang ('%s' not found; set WEFT_CLANG, or run tools/setup.sh --fuzz)" % name)
    cc_autoconf_impl(rctx, overriden_tools = {"gcc": str(clang)})

clang_configure = repository_rule(
    implementation = _clang_configure_impl,
    environ = ["WEFT_CLANG", "PATH"],
    configure = True,
    local = True,
)
