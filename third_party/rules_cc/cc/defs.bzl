"""Forwards rules_cc's public rules to Bazel 4.2.3's native C++ rules.

Debian's bazel-rules-cc targets newer Bazel; this shim is all @bazel_tools needs.
"""

def cc_library(**kwargs):
    native.cc_library(**kwargs)

def cc_binary(**kwargs):
    native.cc_binary(**kwargs)

def cc_test(**kwargs):
    native.cc_test(**kwargs)

def cc_toolchain(**kwargs):
    native.cc_toolchain(**kwargs)

def cc_toolchain_suite(**kwargs):
    native.cc_toolchain_suite(**kwargs)

def cc_import(**kwargs):
    native.cc_import(**kwargs)

def objc_library(**kwargs):
    native.objc_library(**kwargs)
