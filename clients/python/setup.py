"""Builds ipcfloor._ipcfloor (src/_ipcfloor.c) against an installed ipcfloor and ships a copy of
its libipcfloor.so.0 inside the package, found at run time through the rpath $ORIGIN: the
installed package does not depend on where the ipcfloor prefix lives afterwards. The shared
libraries libipcfloor.so.0 needs beyond glibc and GCC's C++ runtime (libfmt.so.9 on Debian 12)
travel with it too, each with the copyright file dpkg knows for it, listed in
ipcfloor/_carried.txt, which the package loads first: a wheel built
here (`pip wheel --no-build-isolation`) installs into any venv of the same Python that has
numpy, on any Linux with glibc 2.33 and libstdc++ of GCC 11 or later.

The C ABI it builds against, first found wins:
  1. IPCFLOOR_PREFIX: a prefix holding include/ipcfloor/ipcfloor.h and lib/libipcfloor.so;
  2. ipcfloor_layout.json beside this file: written by CMake into PREFIX/share/ipcfloor/python
     (and into a build tree's share/ipcfloor/python, which mirrors it), relative paths to the
     header and the library of that same installation;
  3. pkg-config ipcfloor (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig).
Build files go to a temporary folder, so an installed prefix may be read-only.
"""

import atexit
import json
import os
import re
import shutil
import subprocess
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))  # not realpath: a build tree links its files here
LIBRARY = "libipcfloor.so.0"
# What every Linux with glibc and GCC's runtime has: the package takes these from the host.
HOST_LIBRARIES = ("linux-vdso.so", "ld-linux", "libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so",
                  "libstdc++.so", "libgcc_s.so")
CARRIED_LIST = "_carried.txt"


def from_pkg_config():
    try:
        found = [subprocess.run(["pkg-config", f"--variable={v}", "ipcfloor"], capture_output=True, text=True,
                                check=True).stdout.strip() for v in ("includedir", "libdir")]
    except (OSError, subprocess.CalledProcessError):
        return None
    return found[0], found[1], "pkg-config ipcfloor"


def find_ipcfloor():
    """(include dir, lib dir, where they came from), or SystemExit naming every place looked at."""
    tried = []
    candidates = []
    prefix = os.environ.get("IPCFLOOR_PREFIX")
    if prefix:
        candidates.append((os.path.join(prefix, "include"), os.path.join(prefix, "lib"), "IPCFLOOR_PREFIX"))
    layout_file = os.path.join(HERE, "ipcfloor_layout.json")
    if os.path.exists(layout_file):
        with open(layout_file) as f:
            layout = json.load(f)
        candidates.append((os.path.normpath(os.path.join(HERE, layout["include"])),
                           os.path.normpath(os.path.join(HERE, layout["lib"])), "ipcfloor_layout.json"))
    pkg = from_pkg_config()
    if pkg:
        candidates.append(pkg)
    for include, lib, where in candidates:
        header = os.path.join(include, "ipcfloor", "ipcfloor.h")
        if os.path.exists(header) and os.path.exists(os.path.join(lib, LIBRARY)):
            return include, lib, where
        tried.append(f"{where}: {header} and {os.path.join(lib, LIBRARY)}")
    raise SystemExit("ipcfloor: cannot find the ipcfloor C library to build against; looked at:\n  " +
                     ("\n  ".join(tried) or "(nothing: no IPCFLOOR_PREFIX, no ipcfloor_layout.json, no pkg-config)") +
                     "\ninstall ipcfloor (cmake --install BUILD --prefix PREFIX) and pip install PREFIX/share/ipcfloor/python, "
                     "or set IPCFLOOR_PREFIX=PREFIX")


def header_version(include):
    with open(os.path.join(include, "ipcfloor", "ipcfloor.h")) as f:
        text = f.read()
    parts = [re.search(rf"#define IPCFLOOR_VERSION_{p} (\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise SystemExit(f"ipcfloor: {include}/ipcfloor/ipcfloor.h has no IPCFLOOR_VERSION_MAJOR/MINOR/PATCH")
    return ".".join(p.group(1) for p in parts)


def copyright_of(path):
    """The Debian copyright file of the package that installed `path` (how a carried library's
    license travels with it), or None where dpkg does not know it."""
    try:
        owner = subprocess.run(["dpkg-query", "-S", os.path.realpath(path)], capture_output=True, text=True)
    except OSError:
        return None
    package = owner.stdout.split(":")[0].strip() if owner.returncode == 0 else ""
    notice = os.path.join("/usr/share/doc", package, "copyright")
    return notice if package and os.path.exists(notice) else None


def carried_libraries(library):
    """[(soname, path)] of the shared libraries `library` needs beyond HOST_LIBRARIES, as ldd
    resolves them here, dependencies after what needs them."""
    listing = subprocess.run(["ldd", library], capture_output=True, text=True)
    if listing.returncode != 0:
        raise SystemExit(f"ipcfloor: ldd {library} failed: {listing.stderr.strip()}")
    carried = []
    for line in listing.stdout.splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if not arrow or name.startswith(HOST_LIBRARIES):
            continue
        path = rest.split(" (")[0].strip()
        if not path or path == "not found":
            raise SystemExit(f"ipcfloor: {library} needs {name}, which ldd does not find: install it (tools/setup)")
        carried.append((name, path))
    return carried


class BuildWithLibrary(build_ext):
    """Builds the extension, then puts the library it links beside it (its rpath is $ORIGIN), with
    the libraries that library needs from outside the host's base (CARRIED_LIST, in load order)."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "ipcfloor") if not self.inplace else os.path.join(HERE, "ipcfloor")
        shutil.copyfile(os.path.join(LIB_DIR, LIBRARY), os.path.join(target, LIBRARY))
        carried = carried_libraries(os.path.join(LIB_DIR, LIBRARY))
        for name, path in carried:
            shutil.copyfile(path, os.path.join(target, name))
            notice = copyright_of(path)
            if notice:
                shutil.copyfile(notice, os.path.join(target, f"{name}.copyright"))
        with open(os.path.join(target, CARRIED_LIST), "w") as listing:
            listing.writelines(f"{name}\n" for name, _ in reversed(carried))  # a dependency before its users

    def get_outputs(self):
        carried = carried_libraries(os.path.join(LIB_DIR, LIBRARY))
        names = [name for name, _ in carried] + [f"{name}.copyright" for name, path in carried if copyright_of(path)]
        return super().get_outputs() + [os.path.join(self.build_lib, "ipcfloor", name)
                                         for name in [LIBRARY, CARRIED_LIST, *names]]


INCLUDE_DIR, LIB_DIR, FOUND_BY = find_ipcfloor()
WORK = tempfile.mkdtemp(prefix="ipcfloor-build-")
atexit.register(shutil.rmtree, WORK, ignore_errors=True)

setup(
    version=header_version(INCLUDE_DIR),
    packages=["ipcfloor"],
    package_data={"ipcfloor": ["py.typed", "*.pyi"]},
    zip_safe=False,
    ext_modules=[Extension(
        "ipcfloor._ipcfloor", ["src/_ipcfloor.c"],
        include_dirs=[INCLUDE_DIR], library_dirs=[LIB_DIR], libraries=["ipcfloor"],
        extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra"],
        extra_link_args=["-Wl,-rpath,$ORIGIN"])],
    cmdclass={"build_ext": BuildWithLibrary},
    options={"build": {"build_base": os.path.join(WORK, "build")}, "egg_info": {"egg_base": WORK}},
)
