"""The optional C kernels: the stores' decisions (src/ratewarden/storage/_speedups.c) and a
rate limit response's wire bytes (src/ratewarden/server/_wire.c).

_speedups.c is one translation unit that includes its parts (_speedups_*.h, listed as its
depends, so that a change to one rebuilds it and an sdist carries them). Everything else is in
pyproject.toml. Without a C compiler (or Python headers) the
extensions are skipped and ratewarden runs its pure Python path, with the same answers.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ratewarden.storage._speedups",
            ["src/ratewarden/storage/_speedups.c"],
            depends=[
                f"src/ratewarden/storage/_speedups_{part}.h"
                for part in (
                    "base",
                    "table",
                    "decide",
                    "batch",
                    "calls",
                    "maker",
                    "reply",
                    "plan",
                    "planner",
                )
            ],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "ratewarden.server._wire",
            ["src/ratewarden/server/_wire.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
