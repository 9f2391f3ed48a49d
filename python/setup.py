"""Builds the hopattn PyTorch package.

The extension ``hopattn._C`` is a thin layer of torch glue over the core C++ library
``libhopattn.so``; the library itself is built with CMake beforehand:

    cmake -S . -B build -G Ninja && cmake --build build --target hopattn
    pip install --no-build-isolation python/          # or: pip install --no-build-isolation -e python/

Environment:
    HOPATTN_BUILD_DIR    folder holding libhopattn.so (default: <repo>/build)
    HOPATTN_INCLUDE_DIR  folder holding hopattn/api.hpp (default: <repo>/include)
    MAX_JOBS             parallel compile jobs (torch's ninja build honours it)
"""

import os
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def read_version() -> str:
    text = (HERE / "hopattn" / "_version.py").read_text()
    return re.search(r'__version__\s*=\s*"([^"]+)"', text).group(1)


def core_paths():
    build_dir = Path(os.environ.get("HOPATTN_BUILD_DIR", REPO / "build")).expanduser().resolve()
    include_dir = Path(os.environ.get("HOPATTN_INCLUDE_DIR", REPO / "include")).expanduser().resolve()
    if not (include_dir / "hopattn" / "api.hpp").is_file():
        raise SystemExit(
            f"hopattn: core headers not found under {include_dir} (expected hopattn/api.hpp); "
            "set HOPATTN_INCLUDE_DIR")
    libs = sorted(build_dir.glob("libhopattn.so*")) + sorted(build_dir.glob("src/libhopattn.so*"))
    if not libs:
        raise SystemExit(
            f"hopattn: libhopattn.so not found in {build_dir}. Build the core library first:\n"
            f"    cmake -S {REPO} -B {build_dir} -G Ninja && cmake --build {build_dir} --target hopattn\n"
            "or point HOPATTN_BUILD_DIR at an existing build.")
    lib_dir = libs[0].parent
    return include_dir, lib_dir


def extensions():
    from torch.utils.cpp_extension import CUDA_HOME, CUDAExtension

    if CUDA_HOME is None:
        raise SystemExit("hopattn: CUDA toolkit not found; set CUDA_HOME (e.g. /usr/local/cuda)")
    include_dir, lib_dir = core_paths()
    print(f"hopattn: core headers from {include_dir}, libhopattn.so from {lib_dir}")
    return [
        CUDAExtension(
            name="hopattn._C",
            sources=["csrc/ops.cpp"],
            include_dirs=[str(include_dir), os.path.join(CUDA_HOME, "include")],
            library_dirs=[str(lib_dir)],
            libraries=["hopattn"],
            # Found at import time without LD_LIBRARY_PATH.
            extra_link_args=[f"-Wl,-rpath,{lib_dir}"],
            extra_compile_args={"cxx": ["-O2", "-Wall"], "nvcc": ["-O2"]},
        )
    ]


def cmdclass():
    from torch.utils.cpp_extension import BuildExtension

    # Ninja when available (honours MAX_JOBS), else the plain setuptools compiler.
    return {"build_ext": BuildExtension}


setup(
    name="hopattn",
    version=read_version(),
    description="FlashAttention-3 style attention for NVIDIA Hopper (sm_90a): PyTorch bindings",
    packages=find_packages(include=["hopattn", "hopattn.*"]),
    ext_modules=extensions(),
    cmdclass=cmdclass(),
    python_requires=">=3.9",
    install_requires=["torch>=2.4"],
    zip_safe=False,
)
