"""Builds torch_layouts and its C++ runtime (torch_layouts._C).

Install against the PyTorch already present (never let pip fetch another one):
    pip install torch==2.13.0 && pip install --no-build-isolation -e .
"""

import glob
import os

# Never autoload the package being built (its installed entry point would import it).
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import find_packages, setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

# -fopenmp: at::parallel_for is inlined from ATen's OpenMP header; without it copies run serially.
flags = ["-O3", "-g0", "-fopenmp", "-Wall", "-Wno-unused-parameter", "-Wno-interference-size"]
if os.environ.get("TORCH_LAYOUTS_ASAN"):
    flags = ["-O1", "-g", "-fopenmp", "-fsanitize=address", "-fno-omit-frame-pointer", "-Wall"]

setup(
    name="torch_layouts",
    version="0.1.0",
    description="A simulated PyTorch device whose tensors live in tiled device layouts (Spyre, HTP, TensorRT, MACE)",
    packages=find_packages(include=["torch_layouts", "torch_layouts.*"]),
    python_requires=">=3.10",
    ext_modules=[
        CppExtension(
            "torch_layouts._C",
            sorted(glob.glob("csrc/*.cpp")),
            extra_compile_args=flags,
            extra_link_args=["-fopenmp"] + (["-fsanitize=address"] if os.environ.get("TORCH_LAYOUTS_ASAN") else []),
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    entry_points={"torch.backends": ["torch_layouts = torch_layouts:_autoload"]},
)
