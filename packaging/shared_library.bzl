"""One shared library from the object files of Loom's cc_library targets.

A cc_binary(linkshared = True) over the libraries would pull in only the
objects some other object references, which is none; this links every object
of every library in `deps` (transitively), plus the link flags the libraries
carry for the system packages and CUDA (-lfmt, -ldl, -lcudart, ...).
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _unique(items):
    seen = {}
    for item in items:
        seen[item] = True
    return seen.keys()

def _shared_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    merged = cc_common.merge_cc_infos(cc_infos = [dep[CcInfo] for dep in ctx.attr.deps])
    objects = []
    flags = []
    for linker_input in merged.linking_context.linker_inputs.to_list():
        flags.extend(linker_input.user_link_flags)
        for library in linker_input.libraries:
            objects.extend(library.pic_objects or library.objects)
    linked = cc_common.link(
        actions = ctx.actions,
        name = ctx.attr.library_name,
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        compilation_outputs = cc_common.create_compilation_outputs(
            objects = depset(objects),
            pic_objects = depset(objects),
        ),
        user_link_flags = _unique(flags) + ["-Wl,-soname,lib%s.so" % ctx.attr.library_name],
        output_type = "dynamic_library",
    )
    library = linked.library_to_link.resolved_symlink_dynamic_library or \
              linked.library_to_link.dynamic_library
    return [DefaultInfo(files = depset([library]))]

shared_library = rule(
    implementation = _shared_library_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "library_name": attr.string(mandatory = True),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
