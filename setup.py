"""The optional C kernel of the memory store's GCRA decision (src/ratewarden/storage/_speedups.c).

Everything else is in pyproject.toml. Without a C compiler (or Python headers) the
extension is skipped and ratewarden runs its pure Python path, with the same answers.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ratewarden.storage._speedups",
            ["src/ratewarden/storage/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
