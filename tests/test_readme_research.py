"""The README's research session, run as written (ctest `readme_research`): a vendor's CSV with a
`Date,Open,High,Low,Close,Adj Close,Volume` header, the README's `ipcfloor serve` line (the
engine's name made unique), its Python block in the Python package's venv, which sees Debian's
pandas and matplotlib; then the DataFrame it built must hold, row for row and bit for bit, what
`ipcfloor sweep --inproc` prints on the same CSV and column, the plot must be a PNG, and the
engine must stop cleanly on the README's SIGTERM. The README's block on statistics, bar ranges
and trade lists runs as written against the same engine.

Usage: VENV_PYTHON test_readme_research.py IPCFLOOR_BINARY
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile

import numpy as np

from test_python_support import check, finish, stop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BARS = 3000
FRAME_MARK = "readme_research frame: "


def readme_blocks():
    """The section's `sh` and `python` blocks, as the README writes them."""
    text = open(os.path.join(ROOT, "README.md")).read()
    start = text.find("A research session, end to end")
    if start < 0:
        raise SystemExit("README.md has no 'A research session, end to end'")
    blocks = re.findall(r"```(sh|python)\n(.*?)```", text[start:], re.S)
    return blocks[0][1], blocks[1][1]


def readme_stats_block():
    """The Python block of the README's paragraph on statistics, bar ranges and trade lists."""
    text = open(os.path.join(ROOT, "README.md")).read()
    start = text.find("Statistics, bar ranges and trade lists.")
    if start < 0:
        raise SystemExit("README.md has no 'Statistics, bar ranges and trade lists.'")
    return re.findall(r"```python\n(.*?)```", text[start:], re.S)[0]


def write_vendor_csv(path):
    """A vendor's daily file: the closes the engine should take are in `Adj Close`; `Close` is the
    raw price, with a 2-for-1 split halfway, so a sweep on the wrong column gives other rows."""
    rng = np.random.default_rng(5)
    adjusted = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, BARS)))
    with open(path, "w") as f:
        f.write("Date,Open,High,Low,Close,Adj Close,Volume\n")
        for i, close in enumerate(adjusted):
            f.write(f"2010-01-{i:04d},{close:.17g},{close * 1.01:.17g},{close * 0.99:.17g},{close * (2.0 if i < BARS // 2 else 1.0):.17g},"
                    f"{close:.17g},{1000 + i}\n")


def serve_argv(shell_line, binary, name):
    """The README's serve line as argv: its binary, its engine name made unique, without the `&`."""
    argv = shlex.split(shell_line.strip().removesuffix("&"))
    check(argv[:2] == ["ipcfloor", "serve"] and argv[argv.index("--name") + 1] == "research",
          f"the README starts `ipcfloor serve --name research`: {argv}")
    argv[0] = binary
    argv[argv.index("--name") + 1] = name
    return argv


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = os.path.abspath(sys.argv[1])
    shell, python = readme_blocks()
    name = f"ipcfloor-research-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="ipcfloor-research-") as tmp:
        write_vendor_csv(os.path.join(tmp, "prices.csv"))
        engine = subprocess.Popen(serve_argv(shell, binary, name), cwd=tmp, stdout=subprocess.PIPE, text=True)
        try:
            ready = engine.stdout.readline()
            if not check(ready.startswith("ready "), f"the README's serve line printed its ready line: {ready!r}"):
                return finish("")
            script = python.replace('"research"', repr(name)) + (
                f"\nimport json\nprint({FRAME_MARK!r} + json.dumps(frame.to_dict(orient='records')))\n")
            env = dict(os.environ, MPLBACKEND="Agg")
            done = subprocess.run([sys.executable, "-c", script], cwd=tmp, capture_output=True, text=True, env=env,
                                  timeout=120)
            check(done.returncode == 0, f"the README's Python block exited {done.returncode}:\n{done.stdout}{done.stderr}")
            check(f"['prices'] {BARS}" in done.stdout, f"it attached to the CSV's series: {done.stdout[:200]}")
            frame = [json.loads(line[len(FRAME_MARK):]) for line in done.stdout.splitlines()
                     if line.startswith(FRAME_MARK)]
            # The statistics block on the same engine: it runs as written (its assert included).
            stats_script = readme_stats_block().replace('"research"', repr(name))
            stats_done = subprocess.run([sys.executable, "-c", stats_script], cwd=tmp, capture_output=True, text=True,
                                        timeout=120)
            check(stats_done.returncode == 0 and "sharpe" in stats_done.stdout,
                  f"the README's statistics block exited {stats_done.returncode}:\n{stats_done.stdout}{stats_done.stderr}")
            png = os.path.join(tmp, "pnl_by_length.png")
            check(os.path.exists(png) and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n",
                  "the plot pnl_by_length.png is a PNG")
        finally:
            engine.send_signal(signal.SIGTERM)  # the README's `kill %1`
            try:
                code = engine.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = stop(engine)
            check(code == 0, f"the engine exits 0 on SIGTERM, got {code}")
            left = [f for f in os.listdir(os.environ.get("IPCFLOOR_SOCKET_DIR", "/dev/shm")) if name in f]
            check(not left, f"the stopped engine left nothing behind: {left}")

        # The same CSV and column in-process: the DataFrame holds these rows bit for bit (both sides
        # print a double so that it reads back to the same bits; they are compared as parsed doubles).
        reference = subprocess.run([binary, "sweep", "--inproc", "--data", os.path.join(tmp, "prices.csv"),
                                    "--column", "Adj Close", "--grid", "6:200:195", "--json", "--quiet"],
                                   capture_output=True, text=True, timeout=120)
        want = [json.loads(line) for line in reference.stdout.splitlines()]
        check(reference.returncode == 0 and len(want) == 195, f"sweep --inproc: {reference.stderr}")
        rows = frame[0] if frame else []
        check(len(rows) == len(want), f"the DataFrame has {len(rows)} rows for {len(want)} lengths")
        for got, row in zip(rows, want):
            windows = [got[k] for k in ("h", "L", "s", "p3", "p2", "p")]
            if not check(windows == row["params"] and got["trades"] == row["trades"] and got["status"] == 0 and
                         got["pnl"] == float(row["pnl"]), f"L={row['L']}: the DataFrame's {got}, sweep's {row}"):
                break
    return finish(f"readme_research: the README's CSV, engine, Python sweep, DataFrame and plot give "
                  f"sweep --inproc's {len(want)} rows; its statistics block runs")


if __name__ == "__main__":
    sys.exit(main())
