#!/usr/bin/python3
"""The Python package as a user gets it, from the build tree (which mirrors an installed prefix):

    python3 -m venv --system-site-packages VENV
    VENV/bin/pip install --no-build-isolation PROJECT        # PROJECT: <build>/share/ipcfloor/python

run with the network cut (`unshare -n`, when this user may; else as is, and it says so). Then:
the package imports; its version is the C library's; it declares numpy; it ships py.typed, the
extension's stubs and its own libipcfloor.so.0, which the extension finds through its rpath
($ORIGIN); pip wrote nothing into PROJECT (a prefix may be read-only); `mypy --strict` passes on
the package's sources; stubtest (mypy's) finds the extension's stubs equal to what it has at run
time (its text signatures); and the source tree itself (clients/python) builds a wheel with
IPCFLOOR_PREFIX pointing at the build tree, writing nothing into the checkout either. That wheel
installs, offline, into a fresh venv that sees no Debian package but numpy, and works there
with the build tree out of reach: it carries libipcfloor.so.0 and the libraries it needs beyond
glibc and libstdc++ (libfmt), and loads them from the package; where a pyenv Python of the same
minor version is installed, the same holds in a venv of it.

The venv stays (VENV, the ctest fixture python_venv): the other Python tests run with its python.

Usage: /usr/bin/python3 test_python_package.py PROJECT VENV BUILD_DIR
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from test_python_support import check, finish

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

def run(argv, what, **kwargs):
    done = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    check(done.returncode == 0, f"{what}: {' '.join(argv)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def offline_prefix():
    """`unshare -n` when this user may cut its own network, else nothing."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    print("test_python_package: cannot unshare the network here; pip runs with it (and needs none)", file=sys.stderr)
    return []


def listing(folder):
    found = set()
    for dirpath, dirnames, files in os.walk(folder):
        found.update(os.path.relpath(os.path.join(dirpath, n), folder) for n in dirnames + files)
    return found


def check_installed(venv_python, build_dir):
    code = ("import importlib.metadata as m, ipcfloor, os; print(ipcfloor.version()); print(m.version('ipcfloor')); "
            "print(m.requires('ipcfloor')); print(os.path.dirname(ipcfloor.__file__)); "
            "import ipcfloor._ipcfloor as e; print(e.__file__)")
    done = run([venv_python, "-c", code], "import the installed package")
    if done.returncode != 0:
        return
    version, metadata_version, requires, package, extension = done.stdout.splitlines()
    header = open(os.path.join(ROOT, "include", "ipcfloor", "ipcfloor.h")).read()
    want = ".".join(re.search(rf"#define IPCFLOOR_VERSION_{p} (\d+)", header).group(1) for p in ("MAJOR", "MINOR", "PATCH"))
    check(version == metadata_version == want, f"versions: library {version}, package {metadata_version}, header {want}")
    check("numpy" in requires, f"the package declares numpy: {requires}")
    for name in ("py.typed", "_ipcfloor.pyi", "libipcfloor.so.0", "_carried.txt", "__init__.py", "socket.py"):
        check(os.path.exists(os.path.join(package, name)), f"the package ships {name}")
    dynamic = run(["readelf", "-d", extension], "readelf -d the extension").stdout
    check("[$ORIGIN]" in dynamic and "libipcfloor.so.0" in dynamic,
          f"the extension needs libipcfloor.so.0 through the rpath $ORIGIN:\n{dynamic}")
    check(build_dir not in dynamic, "the extension holds no path of the build tree")
    resolved = run(["ldd", extension], "ldd the extension").stdout
    check(os.path.join(package, "libipcfloor.so.0") in resolved,
          f"libipcfloor.so.0 resolves to the package's own copy:\n{resolved}")


def numpy_only_site(tmp):
    """A folder a .pth file can add to a venv's path: Debian's numpy (its package and metadata)
    and nothing else, as a venv that has numpy sees it."""
    import numpy
    folder = os.path.join(tmp, "numpy-only")
    os.makedirs(folder)
    package = os.path.dirname(numpy.__file__)
    os.symlink(package, os.path.join(folder, "numpy"))
    for entry in os.listdir(os.path.dirname(package)):
        if entry.startswith("numpy-") and entry.endswith((".egg-info", ".dist-info")):
            os.symlink(os.path.join(os.path.dirname(package), entry), os.path.join(folder, entry))
    return folder


def other_interpreters():
    """Pythons of this one's minor version that are not Debian's (pyenv's, as a pyenv user has
    them), newest first: the wheel must install there too."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    minor = f"{sys.version_info.major}.{sys.version_info.minor}."
    found = []
    for version in sorted(os.listdir(os.path.join(root, "versions")) if os.path.isdir(os.path.join(root, "versions"))
                          else [], reverse=True):
        python = os.path.join(root, "versions", version, "bin", "python3")
        if version.startswith(minor) and os.access(python, os.X_OK):
            found.append(python)
    return found


def check_wheel_in_fresh_venv(wheel, build_dir, tmp, interpreter=sys.executable):
    """The wheel installs offline into a fresh venv of `interpreter` without Debian's site packages
    (numpy alone is made visible) and works with the build tree's library out of its way: the
    extension loads the package's libipcfloor.so.0 and the libraries carried for it, never the
    build tree's or the host's."""
    venv = os.path.join(tmp, f"fresh-venv-{len(os.listdir(tmp))}")
    # Without a pip of its own (ensurepip takes seconds): Debian's pip installs into it (--python).
    if run([interpreter, "-m", "venv", "--without-pip", venv],
           f"{interpreter} -m venv (fresh, no system site packages)").returncode:
        return
    python = os.path.join(venv, "bin", "python")
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "the fresh venv's site").stdout
    with open(os.path.join(site.strip(), "numpy-only.pth"), "w") as pth:
        pth.write((os.path.join(tmp, "numpy-only") if os.path.isdir(os.path.join(tmp, "numpy-only"))
                   else numpy_only_site(tmp)) + "\n")
    done = run([*offline_prefix(), sys.executable, "-m", "pip", "--python", python, "install", "--no-index",
                "--disable-pip-version-check", wheel], "pip install WHEEL into a fresh venv, offline")
    if done.returncode:
        return
    code = ("import ipcfloor, numpy as np\n"
            "print(ipcfloor.__version__)\n"
            "g = ipcfloor.grid(np.round(np.linspace(6, 200, 80)))\n"
            "assert g.shape == (80, 6) and g[0].tolist() == [3, 6, 2, 1, 2, 3], g[:2]\n"
            "maps = open('/proc/self/maps').read()\n"
            "print('\\n'.join(sorted({l.split()[-1] for l in maps.splitlines() if 'libipcfloor' in l or 'libfmt' in l})))\n")
    # The build tree's library is hidden from the dynamic loader too: nothing may resolve to it.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    done = run([python, "-c", code], "import the wheel's package in the fresh venv", cwd=tmp, env=env)
    if done.returncode:
        return
    lines = done.stdout.split()
    package = os.path.join(site.strip(), "ipcfloor")
    want = re.match(r"ipcfloor-([0-9.]+)-", os.path.basename(wheel))
    check(want is not None and lines[0] == want[1],
          f"the fresh venv's ipcfloor.__version__ {lines[0]} is the wheel's ({os.path.basename(wheel)})")
    loaded = lines[1:]
    check(loaded and all(path.startswith(package + os.sep) for path in loaded) and
          any("libipcfloor.so.0" in path for path in loaded),
          f"the extension's libraries come from the package ({package}), not the build tree or the host: {loaded}")
    carried = open(os.path.join(package, "_carried.txt")).read().split()
    check(all(any(path.endswith(os.sep + name) for path in loaded) for name in carried),
          f"every carried library ({carried}) is loaded from the package: {loaded}")


def check_source_tree(build_dir, tmp):
    """The source project builds a wheel against a build tree named by IPCFLOOR_PREFIX, and pip
    leaves the checkout as it was; the wheel works in a fresh venv (check_wheel_in_fresh_venv)."""
    project = os.path.join(ROOT, "clients", "python")
    before = listing(project)
    env = dict(os.environ, IPCFLOOR_PREFIX=build_dir)
    done = run([*offline_prefix(), sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                "--disable-pip-version-check", "-w", os.path.join(tmp, "wheels"), project],
               "pip wheel of clients/python with IPCFLOOR_PREFIX", env=env)
    if done.returncode == 0:
        wheels = os.listdir(os.path.join(tmp, "wheels"))
        if check(len(wheels) == 1 and wheels[0].startswith("ipcfloor-") and wheels[0].endswith(".whl"),
                 f"one wheel: {wheels}"):
            check_wheel_in_fresh_venv(os.path.join(tmp, "wheels", wheels[0]), build_dir, tmp)
            for interpreter in other_interpreters()[:1]:
                check_wheel_in_fresh_venv(os.path.join(tmp, "wheels", wheels[0]), build_dir, tmp, interpreter)
    check(listing(project) == before, f"pip wrote into the checkout: {sorted(listing(project) - before)}")
    missing = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
                              os.path.join(tmp, "none"), project], capture_output=True, text=True,
                             env=dict(os.environ, IPCFLOOR_PREFIX=os.path.join(tmp, "nowhere"),
                                      PKG_CONFIG_PATH=os.path.join(tmp, "nowhere")))
    check(missing.returncode != 0 and "cannot find the ipcfloor C library" in missing.stdout + missing.stderr and
          "IPCFLOOR_PREFIX" in missing.stdout + missing.stderr,
          f"without an ipcfloor to build against, the build names where it looked:\n{missing.stderr[-2000:]}")


def main():
    if len(sys.argv) != 4:
        raise SystemExit("usage: /usr/bin/python3 test_python_package.py PROJECT VENV BUILD_DIR")
    project, venv, build_dir = (os.path.abspath(a) for a in sys.argv[1:])
    shutil.rmtree(venv, ignore_errors=True)
    before = listing(project)
    if run([sys.executable, "-m", "venv", "--system-site-packages", venv], "python3 -m venv").returncode != 0:
        return 1
    venv_python = os.path.join(venv, "bin", "python")
    done = run([*offline_prefix(), os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation", project],
               "pip install --no-build-isolation PROJECT, offline")
    if done.returncode != 0:
        return 1
    check(listing(project) == before, f"pip wrote into the project: {sorted(listing(project) - before)}")
    check_installed(venv_python, build_dir)

    has_mypy = subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode == 0
    if check(has_mypy, f"mypy runs under {sys.executable} (apt-get install python3-mypy; tools/setup does)"):
        done = run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
                    "--python-executable", venv_python, "ipcfloor"], "mypy --strict on the package",
                   cwd=os.path.join(ROOT, "clients", "python"))
        check("Success" in done.stdout, f"mypy --strict: {done.stdout}")
        # The extension's stubs against the extension itself (its text signatures, constants and
        # types), run in the venv the package is installed in, with mypy's defaults.
        with tempfile.TemporaryDirectory(prefix="ipcfloor-stubtest-") as where:
            config = os.path.join(where, "mypy.ini")
            with open(config, "w") as f:
                f.write("[mypy]\n")
            done = run([venv_python, "-m", "mypy.stubtest", "--mypy-config-file", config, "ipcfloor._ipcfloor"],
                       "stubtest ipcfloor._ipcfloor", cwd=where, env=dict(os.environ, MYPY_CACHE_DIR=where))
        check("Success" in done.stdout, f"stubtest: {done.stdout}")
    with tempfile.TemporaryDirectory(prefix="ipcfloor-pypackage-") as tmp:
        check_source_tree(build_dir, tmp)

    return finish(f"python package: pip install --no-build-isolation into a --system-site-packages venv, offline; "
                  f"it ships its types and library and passes mypy --strict ({venv})")

if __name__ == "__main__":
    sys.exit(main())
