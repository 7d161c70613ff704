"""Builds the kwire._codec extension and kwire.confluent's compiled Message (Cython).  `pip
install .` runs this."""
import os

from Cython.Build import cythonize
from setuptools import Extension, setup

extra_compile_args = ["-O3"] if os.name != "nt" else []

extensions = [
    Extension(
        "kwire._codec",
        ["kwire/_codec.pyx"],
        extra_compile_args=extra_compile_args,
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
