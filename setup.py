"""Build both compiled modules into one wheel.

setuptools drives the build because it can compile the pyo3 crate (through
setuptools-rust) and the Cython module in one backend; maturin cannot compile Cython.
`maturin develop -m rust/ferromq-py/Cargo.toml` still works for the Rust-only loop.
See docs/architecture/build.md.
"""

import re
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools_rust import Binding, RustExtension

# The one version (pyproject.toml), compiled into _protocol for `ferromq version`.
VERSION = re.search(r'^version = "([^"]+)"', Path("pyproject.toml").read_text(), re.M)[1]

setup(
    rust_extensions=[
        RustExtension(
            "ferromq._core",
            path="rust/ferromq-py/Cargo.toml",
            binding=Binding.PyO3,
            debug=False,
        )
    ],
    ext_modules=cythonize(
        [
            Extension(
                "ferromq._protocol",
                ["cython/_protocol.pyx"],
                # ferromq_raw_feed.h: the read path's C struct, shared with the Rust side.
                include_dirs=["rust/ferromq-py/include"],
                define_macros=[("FERROMQ_VERSION", f'"{VERSION}"')],
            )
        ],
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "auto_pickle": False,
            "autotestdict": False,
        },
    ),
    zip_safe=False,
)
