#!/usr/bin/python3
"""tools/plot_report.py on every kind of JSON `ipcfloor bench` writes: one suite's file (DIR/ladder.json
of `bench ladder --out DIR`, and a suite with no plot of its own), the combined report.json of
`bench all`, and the topology.json of `ipcfloor topology --out DIR` (a heatmap). Each drawn PNG
exists and the list on stdout names exactly them. A ladder of 18 rungs gets 18 colours, the same
in both of its plots, and legends beside the plots. Run by a python without matplotlib (python -I
-S: no site packages), it names that python and exits 3.

Usage: /usr/bin/python3 test_python_plot_report.py
"""

import json
import os
import subprocess
import sys
import tempfile

import matplotlib
from matplotlib.figure import Figure

from test_python_support import check, finish

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOT = os.path.join(ROOT, "tools", "plot_report.py")

def check_eighteen_rungs(tmp):
    """A ladder of 18 rungs: in ladder.png and ladder_percentiles.png every rung has its own colour,
    the same in both, and the legend lies beside the plot, off its lines."""
    sys.path.insert(0, os.path.dirname(PLOT))
    import plot_report  # noqa: E402 - the script as a module, to look at the figures it draws
    figures = []
    closed = plot_report.plt.close
    plot_report.plt.close = lambda fig=None: figures.append(fig) if isinstance(fig, Figure) else closed(fig)
    rows = []
    for i in range(18):
        base = 100.0 * (1 + i)
        rows.append({"name": f"rung-{i}", "p50": base, "p90": base * 1.2, "p99": base * 1.5, "p999": base * 2,
                     "p9999": base * 3, "max": base * 5,
                     "distribution": [[p, base * (1 + 4 * p)] for p in (0.0, 0.5, 0.9, 0.99, 0.999)]})
    plot_report.ladder_plot({"results": rows}, tmp)
    plot_report.percentile_plot({"results": rows}, tmp)
    check(len(figures) == 2, f"two figures drawn: {len(figures)}")
    colours = []
    for fig in figures:
        ax = fig.axes[0]
        lines = [line for line in ax.get_lines() if line.get_label().startswith("rung-")]
        drawn = [tuple(matplotlib.colors.to_rgba(line.get_color())) for line in lines]
        check(len(lines) == 18 and len(set(drawn)) == 18, f"18 rungs in 18 colours: {len(set(drawn))} colours")
        colours.append(drawn)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legend = ax.get_legend().get_window_extent(renderer)
        plot = ax.get_window_extent(renderer)
        check(legend.x0 >= plot.x1, f"the legend ({legend.x0:.0f}..{legend.x1:.0f} px) is beside the plot "
                                    f"(..{plot.x1:.0f} px)")
    check(len(colours) == 2 and colours[0] == colours[1], "each rung has the same colour in both plots")
    plot_report.plt.close = closed


def main():
    with tempfile.TemporaryDirectory(prefix="ipcfloor-plots-") as tmp:
        check_eighteen_rungs(tmp)
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
