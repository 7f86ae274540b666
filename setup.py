"""Builds the C++ runtime torch_layouts._C; the package itself is declared in pyproject.toml.

Install against the PyTorch already present (never let pip fetch another one):
    pip install torch==2.13.0 && pip install --no-build-isolation -e ".[test]"
"""

import glob
import os

# Never autoload the package being built (its installed entry point would import it).
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths  # noqa: E402

# -std=c++20: the runtime uses std::span (PyTorch 2.11's extensions default to C++17).
# -fopenmp: at::parallel_for is inlined from ATen's OpenMP header; without it copies run serially.
# -ffp-contract=off: a product is rounded the same way wherever it is used (GCC would fuse some
# multiply-adds and not others, e.g. the row kernels' two passes over one row).
flags = ["-O3", "-g0", "-fopenmp", "-ffp-contract=off", "-Wall", "-Wno-unused-parameter", "-Wno-interference-size"]
if os.environ.get("TORCH_LAYOUTS_ASAN"):
    flags = ["-O1", "-g", "-fopenmp", "-fsanitize=address", "-fno-omit-frame-pointer", "-Wall"]
flags = ["-std=c++20", *flags]

# A PyTorch without the PrivateUse1 profiler hook (2.11 has none) builds the runtime without the
# device-event profiler (csrc/kineto_profiler.cpp): profiles then show CPU events only.
sources = sorted(glob.glob("csrc/*.cpp"))
if not os.path.exists(os.path.join(include_paths()[0], "torch/csrc/profiler/standalone/privateuse1_profiler.h")):
    sources.remove("csrc/kineto_profiler.cpp")

setup(
    ext_modules=[
        CppExtension(
            "torch_layouts._C",
            sources,
            # Kineto's headers (csrc/kineto_profiler.cpp: the PrivateUse1 activity profiler).
            include_dirs=[os.path.join(include_paths()[0], "kineto")],
            extra_compile_args=flags,
            extra_link_args=["-fopenmp"] + (["-fsanitize=address"] if os.environ.get("TORCH_LAYOUTS_ASAN") else []),
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
