"""Build both compiled modules into one wheel.

setuptools drives the build because it can compile the pyo3 crate (through
setuptools-rust) and the Cython module in one backend; maturin cannot compile Cython.
`maturin develop -m rust/ferromq-py/Cargo.toml` still works for the Rust-only loop.
See docs/architecture.md, "Build".
"""

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools_rust import Binding, RustExtension

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
