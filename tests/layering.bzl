"""The C++ sources of the libraries and binaries a target depends on, for tests that read them.

weft_sources(name, roots) collects, through every `deps` and `srcs` edge below `roots`, the source
files (`srcs`, `hdrs`, `textual_hdrs`) of this workspace's targets, and writes their paths, one a
line, to `<name>.txt`; the files come with it as runfiles. The set follows the build graph, so a new
package is covered as soon as something depends on it. Sources selected only in another
configuration (the GPU code without --config=cuda) are not in the graph and are not listed.
"""

_WeftSourcesInfo = provider(fields = ["files"])

_SOURCE_ATTRS = ["srcs", "hdrs", "textual_hdrs"]
_EDGES = ["deps", "srcs"]  # srcs: a genrule's inputs (the GPU kernel sources)
_SOURCE_EXTENSIONS = ["h", "cc", "cuh"]

def _sources_aspect_impl(target, ctx):
    direct = []
    for attr in _SOURCE_ATTRS:
        for dep in getattr(ctx.rule.attr, attr, []):
            for f in dep.files.to_list():
                if f.is_source and f.owner.workspace_name == "" and f.extension in _SOURCE_EXTENSIONS:
                    direct.append(f)
    transitive = []
    for attr in _EDGES:
        transitive += [dep[_WeftSourcesInfo].files for dep in getattr(ctx.rule.attr, attr, []) if _WeftSourcesInfo in dep]
    return [_WeftSourcesInfo(files = depset(direct, transitive = transitive))]

_sources_aspect = aspect(
    implementation = _sources_aspect_impl,
    attr_aspects = _EDGES,
)

def _weft_sources_impl(ctx):
    files = depset(transitive = [root[_WeftSourcesInfo].files for root in ctx.attr.roots])
    manifest = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(manifest, "".join([f.short_path + "\n" for f in files.to_list()]))
    return [DefaultInfo(files = depset([manifest]), runfiles = ctx.runfiles(files = [manifest], transitive_files = files))]

weft_sources = rule(
    implementation = _weft_sources_impl,
    attrs = {"roots": attr.label_list(aspects = [_sources_aspect])},
)
