"""Builds the kwire._codec extension and kwire.confluent's compiled Message (Cython).  `pip
install .` runs this."""
import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

extra_compile_args = ["-O3"] if os.name != "nt" else []
# The codec dlopens liblz4/libzstd and starts a pthread (kwire/_inflate.pxi); before glibc 2.34
# (manylinux_2_28 and older) those live in libdl and libpthread, so name them.
libraries = ["dl", "pthread"] if sys.platform.startswith("linux") else []

extensions = [
    Extension(
        "kwire._codec",
        ["kwire/_codec.pyx"],
        extra_compile_args=extra_compile_args,
        libraries=libraries,
    ),
    Extension(
        "kwire.confluent._message",
        ["kwire/confluent/_message.pyx"],
        extra_compile_args=extra_compile_args,
    ),
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
        annotate=bool(os.environ.get("KWIRE_ANNOTATE")),
    ),
)
