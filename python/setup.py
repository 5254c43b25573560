"""Builds and installs the tether package: `pip install ./python` (no network).

The package is pure Python over libtether_c.so (the C interface, built by the
repository's CMake project and copied in, debug info stripped). Where it
comes from, in order:
  $TETHER_LIBRARY         a built libtether_c.so
  $TETHER_BUILD_DIR       a configured build tree: its tether_c target is built
  otherwise               `./dev build release --target tether_c` in this
                          checkout (sets up what it needs, idempotently)
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def built_library() -> Path:
    if os.environ.get("TETHER_LIBRARY"):
        return Path(os.environ["TETHER_LIBRARY"])
    if os.environ.get("TETHER_BUILD_DIR"):
        build = Path(os.environ["TETHER_BUILD_DIR"])
        subprocess.run(["cmake", "--build", str(build), "--target", "tether_c"], check=True)
    else:
        build = ROOT / "build" / "release"
        subprocess.run([str(ROOT / "dev"), "build", "release", "--target", "tether_c"], check=True, cwd=ROOT)
    return build / "host" / "capi" / "libtether_c.so"


class BuildPy(build_py):
    def run(self):
        super().run()
        src = built_library()
        if not src.is_file():
            raise SystemExit(f"tether: {src} was not built")
        dst = Path(self.build_lib) / "tether" / "libtether_c.so"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        if shutil.which("strip"):
            subprocess.run(["strip", "--strip-debug", str(dst)], check=True)
        dst.chmod(0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(
    name="tether",
    version="0.1.0",
    description="Exact, uniform processes in any cloud sandbox (asyncio, over libtether)",
    packages=["tether"],
    package_dir={"tether": "tether"},
    package_data={"tether": ["py.typed"]},
    python_requires=">=3.9",
    install_requires=["cffi"],
    cmdclass={"build_py": BuildPy},
    distclass=BinaryDistribution,
    zip_safe=False,
)
