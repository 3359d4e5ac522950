#!/usr/bin/python3
"""tools/plot_report.py on every kind of JSON `ipcfloor bench` writes: one suite's file (DIR/ladder.json
of `bench ladder --out DIR`, and a suite with no plot of its own), the combined report.json of
`bench all`, and the topology.json of `ipcfloor topology --out DIR` (a heatmap). Each drawn PNG
exists and the list on stdout names exactly them. Run by a python without matplotlib (python -I -S:
no site packages), it names that python and exits 3.

Usage: /usr/bin/python3 test_python_plot_report.py
"""

import json
import os
import subprocess
import sys
import tempfile

from test_python_support import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOT = os.path.join(ROOT, "tools", "plot_report.py")

def main():
    with tempfile.TemporaryDirectory(prefix="ipcfloor-plots-") as tmp:
        for report, expected in (("ladder.json", {"ladder.png", "ladder_percentiles.png"}),
                                 ("hygiene.json", {"hygiene_results_table.png"}),
                                 ("python.json", {"python_results.png"}),
                                 ("topology.json", {"topology.png"}),
                                 ("report.json", {"ladder.png", "throughput.png", "python_results.png"})):
            out = os.path.join(tmp, report)
            done = subprocess.run([sys.executable, PLOT, os.path.join(ROOT, "docs", "results", report), out],
                                  capture_output=True, text=True, timeout=300)
            drawn = json.loads(done.stdout) if done.returncode == 0 else []
            check(done.returncode == 0 and expected <= set(drawn), f"{report}: drew {drawn}, want {expected}: "
                                                                   f"{done.stderr}")
            check(sorted(drawn) == sorted(os.listdir(out)) if drawn else False,
                  f"{report}: the list names the files written")
        bare = subprocess.run([sys.executable, "-I", "-S", PLOT, "x.json", tmp], capture_output=True, text=True)
        check(bare.returncode == 3 and "No module named 'matplotlib'" in bare.stderr and sys.executable in bare.stderr
              and "/usr/bin/python3" in bare.stderr, f"without matplotlib it names the python: {bare.stderr}")
    return finish("plot_report.py: one suite's file, a suite with no plot of its own and the combined report are "
                  "drawn; without matplotlib it names the python it needs")

if __name__ == "__main__":
    sys.exit(main())
