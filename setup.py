"""Builds the ibverbs-tap preload library (ibverbs_tap/_tap*.so); metadata is in pyproject.toml.

It is a plain shared library loaded with LD_PRELOAD, built as an Extension so that
``pip install`` (editable or not) compiles it. The verbs tap is compiled in when
<infiniband/verbs.h> is available (or not, with IBVERBS_TAP_NO_VERBS=1); without it the library
still taps TCP sockets and its profile files say so.
"""

import os
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError

CSRC = "ibverbs_tap/csrc"


class BuildTap(build_ext):
    def build_extensions(self) -> None:
        if os.environ.get("IBVERBS_TAP_NO_VERBS") != "1" and self._have_verbs_headers():
            for ext in self.extensions:
                ext.define_macros.append(("TAP_HAVE_VERBS", "1"))
        super().build_extensions()

    def _have_verbs_headers(self) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            probe = os.path.join(tmp, "probe.c")
            with open(probe, "w") as f:
                f.write("#include <infiniband/verbs.h>\nint main(void) { return 0; }\n")
            try:
                self.compiler.compile([probe], output_dir=tmp)
            except CompileError:
                return False
        return True


setup(
    ext_modules=[
        Extension(
            "ibverbs_tap._tap",
            sources=[f"{CSRC}/{n}" for n in ("tap_shm.c", "tap_sock.c", "tap_dl.c", "tap_verbs.c")],
            depends=[f"{CSRC}/tap.h"],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-fvisibility=hidden"],
            libraries=["dl", "pthread"],
        )
    ],
    cmdclass={"build_ext": BuildTap},
)
