"""laketide's one compiled module, key hashing (index/_keyhash*.c); everything else is in pyproject.toml.

Optional: where it cannot be built (no C compiler), laketide hashes with numpy (index/hashing.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "laketide.index._keyhash",
            ["index/_keyhash.c", "index/_keyhash_bloom.c", "index/_keyhash_wide.c"],
            depends=["index/_keyhash.h"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
