#!/usr/bin/env python3
"""Draws the benchmark plots from an `ipcfloor bench all` report.json.

Usage: plot_report.py REPORT.json OUT_DIR
Writes PNGs into OUT_DIR and prints the list of file names as JSON on stdout (the report
links them). Each plot is drawn only when its suite is in the report.
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PERCENTILES = [("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9), ("p9999", 99.99), ("max", 100)]


def ladder_plot(ladder, out_dir):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    labels = [label for label, _ in PERCENTILES]
    colors = plt.get_cmap("tab20").colors  # twenty distinct colours: no two rungs share one
    for i, row in enumerate(ladder["results"]):
        ax.plot(range(len(labels)), [row[key] for key, _ in PERCENTILES], marker="o", label=row["name"],
                color=colors[(2 * i) % 20 + (i // 10)], linestyle="-" if i % 2 == 0 else "--")
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(["p50", "p90", "p99", "p99.9", "p99.99", "max"])
    ax.set_ylabel("round trip, ns (log scale)")
    ax.set_title("Floor ladder: RTT of a 48-byte request and reply, by percentile")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    name = "ladder.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return name


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
    ax.legend(fontsize=8)
    fig.tight_layout()
    name = "echo.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return name


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
    for row in ladder["results"]:
        points = [(p, v) for p, v in row.get("distribution", []) if p < 1.0]
        if len(points) < 2:
            continue
        ax.plot([1.0 / (1.0 - p) for p, _ in points], [v for _, v in points], label=row["name"], linewidth=1.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = [1, 2, 10, 100, 1000, 10000, 100000]
    ax.set_xticks(ticks)
    ax.set_xticklabels(["0%", "50%", "90%", "99%", "99.9%", "99.99%", "99.999%"])
    ax.set_xlabel("percentile")
    ax.set_ylabel("RTT, ns (log scale)")
    ax.set_title("Ladder: RTT by percentile, every rung")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    name = "ladder_percentiles.png"
    fig.savefig(os.path.join(out_dir, name), dpi=110)
    plt.close(fig)
    return name


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


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        report = json.load(f)
    out_dir = sys.argv[2]
    suites = report.get("suites", {})
    drawn = []
    if suites.get("ladder", {}).get("results"):
        drawn.append(ladder_plot(suites["ladder"], out_dir))
        drawn.append(percentile_plot(suites["ladder"], out_dir))
    if suites.get("echo", {}).get("series"):
        drawn.append(echo_plot(suites["echo"], out_dir))
    if suites.get("granularity", {}).get("results"):
        drawn.append(granularity_plot(suites["granularity"], out_dir))
    if suites.get("throughput", {}).get("scenarios"):
        drawn.append(throughput_plot(suites["throughput"], out_dir))
    print(json.dumps(drawn))


if __name__ == "__main__":
    main()
