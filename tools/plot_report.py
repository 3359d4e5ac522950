#!/usr/bin/python3
"""Draws the benchmark plots from any `ipcfloor bench` JSON: the combined report.json of `bench all
--out DIR`, one suite's file (`bench ladder --out DIR` writes DIR/ladder.json), or `bench ... --json`.

Usage: plot_report.py REPORT.json OUT_DIR   (installed as PREFIX/share/ipcfloor/tools/plot_report.py)
Writes PNGs into OUT_DIR and prints the list of file names as JSON on stdout (the report links
them). Every line of a plot has a colour of its own (the ladder's 18 rungs keep theirs from one
plot to the next), and legends stand beside the plot, never over its lines. The ladder, echo,
granularity and throughput suites, and `ipcfloor topology --out DIR`'s topology.json (a heatmap of
the floor matrix), get their own plots; every other suite
is drawn from what it holds, wherever in its JSON: each group of latency rows (objects with a
p50) as percentiles, each group of sample lists (per-sweep seconds, ...) sorted, and each table
(a list of objects with numeric fields: hygiene's counters, ablation's shares) as bars per field.
A report with nothing to draw says so on stderr.

Needs matplotlib: Debian's python3-matplotlib, for Debian's /usr/bin/python3 (tools/setup
installs it). Another python (a pyenv one, a venv without system packages) lacks it: this script
then says which python ran it and exits 3.
"""

import json
import os
import re
import sys
import warnings

try:
    import matplotlib
except ImportError as error:
    print(f"plot_report.py: {error} for {sys.executable}: run it with /usr/bin/python3 after apt-get install "
          f"python3-matplotlib (tools/setup does)", file=sys.stderr)
    sys.exit(3)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

warnings.filterwarnings("ignore", message="Tight layout not applied")  # a wide table: drawn as it fits

PERCENTILES = [("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9), ("p9999", 99.99), ("max", 100)]


def line_colors(count):
    """A colour per line, no two alike: tab20's ten dark shades, then its ten light ones, then
    tab20b's and tab20c's twenty each (the ladder's 18 rungs stay within tab20)."""
    tab20 = plt.get_cmap("tab20").colors
    palette = [tab20[(2 * i) % 20 + (i // 10)] for i in range(20)]
    palette += list(plt.get_cmap("tab20b").colors) + list(plt.get_cmap("tab20c").colors)
    return [palette[i % len(palette)] for i in range(count)]


def legend_outside(ax, fontsize=8):
    """The legend to the right of the plot, where it covers no line (saved with bbox_inches="tight")."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def save(fig, out_dir, name, dpi=110):
    fig.savefig(os.path.join(out_dir, name), dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return name


def ladder_plot(ladder, out_dir):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    labels = [label for label, _ in PERCENTILES]
    colors = line_colors(len(ladder["results"]))  # no two rungs share a colour
    for i, row in enumerate(ladder["results"]):
        ax.plot(range(len(labels)), [row[key] for key, _ in PERCENTILES], marker="o", label=row["name"],
                color=colors[i], linestyle="-" if i % 2 == 0 else "--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(["p50", "p90", "p99", "p99.9", "p99.99", "max"])
    ax.set_ylabel("round trip, ns (log scale)")
    ax.set_title("Floor ladder: RTT of a 48-byte request and reply, by percentile")
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax)
    return save(fig, out_dir, "ladder.png")


def echo_plot(echo, out_dir):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for series in echo["series"]:
        xs = [p["bytes"] for p in series["points"]]
        ax.plot(xs, [p["p50"] for p in series["points"]], marker="o", label=f"{series['transport']} p50")
        fit = series.get("fit")
        if fit:
            ax.plot(xs, [fit["floor_ns"] + b / fit["bytes_per_ns"] for b in xs], linestyle="--",
                    label=f"{series['transport']} fit: {fit['floor_ns']:.0f} ns + bytes / {fit['bytes_per_ns']:.2f} B/ns")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("payload, bytes each way (log)")
    ax.set_ylabel("round trip, ns (log)")
    ax.set_title("Echo curve: RTT against payload size")
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax)
    return save(fig, out_dir, "echo.png")


def granularity_plot(granularity, out_dir):
    rows = granularity["results"]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.5))
    names = [r["name"] for r in rows]
    values = [r["p50"] / 1e6 for r in rows]
    ax.barh(names, values)
    ax.set_xscale("log")
    ax.set_xlabel("whole 80-combo sweep, ms (p50, log scale)")
    ax.set_title("Granularity: the same sweep, six ways")
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.1f} ms", va="center", fontsize=8)
    ax.invert_yaxis()
    fig.tight_layout()
    name = "granularity.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return name


def percentile_plot(ladder, out_dir):
    """HdrHistogram's percentile curve of every rung: x = 1/(1-percentile), both axes log."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = line_colors(len(ladder["results"]))  # each rung the colour it has in ladder.png
    for i, row in enumerate(ladder["results"]):
        points = [(p, v) for p, v, *_ in row.get("distribution", []) if p < 1.0]
        if len(points) < 2:
            continue
        ax.plot([1.0 / (1.0 - p) for p, _ in points], [v for _, v in points], label=row["name"], linewidth=1.2,
                color=colors[i], linestyle="-" if i % 2 == 0 else "--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = [1, 2, 10, 100, 1000, 10000, 100000]
    ax.set_xticks(ticks)
    ax.set_xticklabels(["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("RTT, ns (log scale)")
    ax.set_title("Ladder: RTT by percentile, every rung")
    ax.grid(True, which="major", alpha=0.3)
    legend_outside(ax, fontsize=7)
    return save(fig, out_dir, "ladder_percentiles.png")


def throughput_plot(throughput, out_dir):
    rows = throughput["scenarios"]
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(rows) + 1.5))
    names = [f'{r["name"]} ({r["in_flight"]} in flight)' for r in rows]
    p50 = [r["rate_p50"] for r in rows]
    low = [r["rate_p50"] - r["rate_p10"] for r in rows]
    high = [r["rate_p90"] - r["rate_p50"] for r in rows]
    ax.barh(names, p50, xerr=[low, high], capsize=3)
    ax.set_xscale("log")
    ax.set_xlabel("48-byte requests answered per second (p50 over windows; whiskers p10-p90, log scale)")
    ax.set_title("Throughput: one client thread, one serving thread")
    for i, v in enumerate(p50):
        ax.text(v, i, f" {v / 1e6:.2f} M/s" if v >= 1e6 else f" {v / 1e3:.0f} k/s", va="center", fontsize=8)
    ax.invert_yaxis()
    fig.tight_layout()
    name = "throughput.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return name


# The percentiles a latency row may carry, under either spelling.
ROW_PERCENTILES = [("p50", ("p50",)), ("p90", ("p90",)), ("p99", ("p99",)), ("p99.9", ("p999", "p99.9")),
                   ("p99.99", ("p9999", "p99.99")), ("max", ("max",))]


# Lists of numbers drawn as samples: per-sweep seconds, per-round ratios, raw samples.
SAMPLES = re.compile(r"(seconds|samples|_s$|_ns$|round)", re.I)


def topology_plot(topology, out_dir):
    """The floor matrix of `ipcfloor topology` as a heatmap: p50 per pair, cpus in the report's topology
    order (by node, L3 and core), white lines where the node or L3 changes, the best pair boxed."""
    import numpy as np
    order = topology["topology"]["order"]
    index = {cpu: i for i, cpu in enumerate(order)}
    grid = np.full((len(order), len(order)), np.nan)
    for pair in topology["pairs"]:
        if pair.get("samples", 0) > 0 and pair["client_cpu"] in index and pair["server_cpu"] in index:
            i, j = index[pair["client_cpu"]], index[pair["server_cpu"]]
            grid[i, j] = pair["p50_interp"]
            if np.isnan(grid[j, i]):
                grid[j, i] = pair["p50_interp"]
    size = max(4.5, 0.45 * len(order) + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    image = ax.imshow(grid, cmap="viridis_r", interpolation="nearest")
    fig.colorbar(image, ax=ax, label="p50 RTT of one cache line, ns")
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order, fontsize=8)
    ax.set_yticks(range(len(order)))
    ax.set_yticklabels(order, fontsize=8)
    ax.set_xlabel("answering cpu")
    ax.set_ylabel("timing cpu")
    places = {c["cpu"]: (c.get("node"), (c.get("l3") or [None])[0]) for c in topology["topology"]["cpus"]}
    for k in range(1, len(order)):
        if places.get(order[k]) != places.get(order[k - 1]):
            ax.axhline(k - 0.5, color="white", linewidth=2)
            ax.axvline(k - 0.5, color="white", linewidth=2)
    if len(order) <= 16:
        middle = (np.nanmin(grid) + np.nanmax(grid)) / 2 if np.any(~np.isnan(grid)) else 0
        for i in range(len(order)):
            for j in range(len(order)):
                if not np.isnan(grid[i, j]):  # dark text on the light (low) end of viridis_r
                    ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=7,
                            color="black" if grid[i, j] <= middle else "white")
    best = topology.get("best")
    if best:
        for a, b in ((best["client_cpu"], best["server_cpu"]), (best["server_cpu"], best["client_cpu"])):
            ax.add_patch(plt.Rectangle((index[b] - 0.5, index[a] - 0.5), 1, 1, fill=False, edgecolor="red",
                                       linewidth=2.5))
        title = (f"Floor matrix: best cpu {best['client_cpu']} - cpu {best['server_cpu']} ({best['relation']}), "
                 f"p50 {best['p50_interp']:.1f} ns; worst/best {topology.get('worst_over_best', 0):.2f}x")
    else:
        title = "Floor matrix: no pair measured"
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    name = "topology.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return name


def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def collect(node, path, found):
    """Fills found["latency"], found["samples"] and found["tables"] from everything under node:
    (path, unit, [(label, {percentile: value})]), (path, [(key, [numbers])]), (path, [row objects])."""
    if isinstance(node, dict):
        rows = [(key, value) for key, value in node.items() if is_row(value)]
        if rows:
            found["latency"].append((path, node.get("unit", "ns"),
                                     [(row.get("name", key), row_values(row)) for key, row in rows]))
        lists = [(key, value) for key, value in node.items() if SAMPLES.search(key) and isinstance(value, list) and
                 len(value) >= 2 and all(number(v) for v in value)]
        if lists:
            found["samples"].append((path, lists))
        for key, value in node.items():
            if not is_row(value):
                collect(value, f"{path}.{key}" if path else key, found)
    elif isinstance(node, list) and node and all(isinstance(row, dict) for row in node):
        rows = [row for row in node if is_row(row)]
        if rows:
            found["latency"].append((path, "ns", [(row.get("name", f"{path}[{i}]"), row_values(row))
                                                  for i, row in enumerate(rows)]))
        elif any(number(v) for row in node for v in row.values()):
            found["tables"].append((path, node))
        for i, row in enumerate(node):
            for key, value in row.items():
                if isinstance(value, (dict, list)) and not is_row(value):
                    collect(value, f"{path}[{i}].{key}", found)


def is_row(value):
    return isinstance(value, dict) and isinstance(value.get("p50"), (int, float))


def row_values(row):
    values = {}
    for label, keys in ROW_PERCENTILES:
        for key in keys:
            if isinstance(row.get(key), (int, float)):
                values[label] = row[key]
                break
    return values


def groups_plot(suite, groups, out_dir):
    """One chart per group: each row's percentiles, log scale."""
    drawn = []
    for path, unit, rows in groups:
        fig, ax = plt.subplots(figsize=(9, 5.5))
        labels = [label for label, _ in ROW_PERCENTILES]
        colors = line_colors(len(rows))
        for i, (name, values) in enumerate(rows):
            xs = [k for k, label in enumerate(labels) if label in values]
            ax.plot(xs, [values[labels[k]] for k in xs], marker="o", label=str(name), color=colors[i],
                    linestyle="-" if i % 2 == 0 else "--")
        ax.set_yscale("log")
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels)
        ax.set_ylabel(f"{unit} (log scale)")
        ax.set_title(f"{suite}: {path or 'results'} by percentile")
        ax.grid(True, which="both", alpha=0.3)
        legend_outside(ax)
        drawn.append(save(fig, out_dir, file_name(suite, path or "results")))
    return drawn


def file_name(*parts):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", "_".join(p for p in parts if p)) + ".png"


def samples_plot(suite, path, lists, out_dir):
    """Each list of samples sorted: value against the share of samples at or below it."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    colors = line_colors(len(lists))
    for n, (key, values) in enumerate(lists):
        ordered = sorted(values)
        ax.plot([(i + 1) / len(ordered) for i in range(len(ordered))], ordered, marker=".", label=key, color=colors[n])
    ax.set_xlabel("share of samples at or below")
    ax.set_ylabel("value (the unit its name says)")
    if all(v > 0 for _, values in lists for v in values):
        ax.set_yscale("log")
    ax.set_title(f"{suite}: {path or 'samples'}, each sample")
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax)
    return save(fig, out_dir, file_name(suite, path, "samples"))


def table_plot(suite, path, rows, out_dir):
    """One bar chart per numeric field of a table, a bar per row (labelled by its text fields)."""
    fields = [k for k in rows[0] if number(rows[0][k]) and any(number(r.get(k)) and r.get(k) for r in rows)]
    if not fields:  # every number zero: say so in one panel rather than draw empty axes
        fields = [k for k in rows[0] if number(rows[0][k])][:1]
    labels = [" ".join(str(v) for v in row.values() if isinstance(v, str)) or f"{path}[{i}]"
              for i, row in enumerate(rows)]
    columns = 2 if len(fields) > 1 else 1
    lines = -(-len(fields) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(12, 0.35 * len(rows) * lines + 1.5 * lines), squeeze=False)
    for n, field in enumerate(fields):
        ax = axes[n // columns][n % columns]
        ax.barh(range(len(rows)), [row.get(field, 0) if number(row.get(field)) else 0 for row in rows])
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(field, fontsize=9)
    for n in range(len(fields), lines * columns):
        axes[n // columns][n % columns].axis("off")
    fig.suptitle(f"{suite}: {path or 'results'}")
    fig.tight_layout()
    name = file_name(suite, path, "table")
    fig.savefig(os.path.join(out_dir, name), dpi=90)
    plt.close(fig)
    return name


def suites_of(report, path):
    """{suite name: its JSON}: a combined report's suites, one suite's file, or a bare report."""
    if isinstance(report.get("suites"), dict):
        return report["suites"]
    if isinstance(report.get("suite"), str):
        return {report["suite"]: report}
    return {os.path.splitext(os.path.basename(path))[0]: report}


DEDICATED = {
    "ladder": lambda suite, out: [ladder_plot(suite, out), percentile_plot(suite, out)] if suite.get("results") else [],
    "echo": lambda suite, out: [echo_plot(suite, out)] if suite.get("series") else [],
    "granularity": lambda suite, out: [granularity_plot(suite, out)] if suite.get("results") else [],
    "throughput": lambda suite, out: [throughput_plot(suite, out)] if suite.get("scenarios") else [],
    "topology": lambda suite, out: [topology_plot(suite, out)] if suite.get("pairs") else [],
}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    out_dir = sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    suites = suites_of(report, sys.argv[1])
    drawn = []
    for name, suite in suites.items():
        if not isinstance(suite, dict):
            continue
        if name in DEDICATED:
            drawn += DEDICATED[name](suite, out_dir)
            continue
        found = {"latency": [], "samples": [], "tables": []}
        collect({k: v for k, v in suite.items() if k not in ("context", "host", "config", "parity")}, "", found)
        drawn += groups_plot(name, found["latency"], out_dir)
        drawn += [samples_plot(name, path, lists, out_dir) for path, lists in found["samples"]]
        drawn += [table_plot(name, path, rows, out_dir) for path, rows in found["tables"]]
    if not drawn:
        print(f"plot_report.py: nothing to draw in {sys.argv[1]}: suites {sorted(suites)} hold no latency rows, "
              f"sample lists or tables of numbers", file=sys.stderr)
    print(json.dumps(drawn))


if __name__ == "__main__":
    main()
