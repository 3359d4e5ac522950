#!/usr/bin/python3
"""`serve --metrics` as operators run it (ctest `metrics_prometheus`): an engine serving its
exposition over HTTP while sweeps run through it; `promtool check metrics` on what the endpoint
serves and on `status --prometheus`; two scrapes with the same bucket layout for every lane; then a
real Prometheus server (Debian's `prometheus`, on loopback, a temporary config and TSDB, a 1 s
scrape interval) scrapes the engine, and the p99 of the service time comes back through its HTTP
API with histogram_quantile: over rate() while sweeps run, and over the whole histogram once they
stopped, where it must lie in the power-of-two bucket that holds the p99 `status --json` reads
from the segment.

Usage: /usr/bin/python3 test_metrics_prometheus.py IPCFLOOR_BINARY
When promtool or prometheus is missing, `tools/setup prometheus` installs Debian's package; the
test exits 77 (skipped) only when that fails (no root or sudo, no reachable apt), saying why.
"""

import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

from test_python_support import check, finish, stop

SKIPPED = 77


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode(), response.headers.get("Content-Type", "")


def promtool_ok(label, text):
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    return check(done.returncode == 0, f"promtool check metrics on {label}: {done.stdout}{done.stderr}")


def layout(text):
    """{lane: [le, ...]} of the service-time histogram, in order."""
    lanes = {}
    for lane, le in re.findall(r'^ipcfloor_service_seconds_bucket\{[^}]*lane="(\d+)",le="([^"]+)"\}', text, re.M):
        lanes.setdefault(lane, []).append(le)
    return lanes


def start_engine(binary, name):
    engine = subprocess.Popen([binary, "serve", "--name", name, "--bars", "20000", "--wait", "backoff", "--quiet",
                               "--hugepages", "off", "--metrics", "127.0.0.1:0"],
                              stdout=subprocess.PIPE, text=True)
    line = engine.stdout.readline()
    if not line.startswith("ready "):
        stop(engine)
        raise SystemExit(f"serve --metrics printed no ready line: {line!r}")
    return engine, json.loads(line[6:])["metrics"]


def prometheus_installed():
    """True when promtool and prometheus are on the PATH, after installing Debian's package with
    tools/setup where they are not; False (and why) when they cannot be installed."""
    missing = [tool for tool in ("promtool", "prometheus") if shutil.which(tool) is None]
    if not missing:
        return True
    setup = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "setup")
    print(f"metrics_prometheus: {', '.join(missing)} missing: running tools/setup prometheus", flush=True)
    done = subprocess.run([setup, "prometheus"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    still = [tool for tool in ("promtool", "prometheus") if shutil.which(tool) is None]
    if done.returncode == 0 and not still:
        return True
    print(f"metrics_prometheus: skipped: Debian's prometheus cannot be installed here (tools/setup prometheus exited "
          f"{done.returncode}; {', '.join(still or missing)} still missing):\n{done.stdout}{done.stderr}")
    return False


class Prometheus:
    """A Prometheus server on loopback that scrapes `target` every second; query() asks its API."""

    def __init__(self, tmp, target):
        self.port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                    f"  - job_name: ipcfloor\n    static_configs:\n      - targets: ['{target}']\n")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w+")
        self.process = subprocess.Popen(["prometheus", f"--config.file={config}",
                                         f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                         f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                                        stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, expression):
        """The instant vector's values, or [] (not up yet, no data)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        try:
            body, _ = fetch(url, timeout=2)
        except OSError:
            return []
        reply = json.loads(body)
        return [float(r["value"][1]) for r in reply.get("data", {}).get("result", [])]

    def wait_for(self, expression, accept, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            values = self.query(expression)
            if values and accept(values):
                return values
            time.sleep(0.25)
        return self.query(expression)

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.seek(0)
        return self.log.read()


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    if not prometheus_installed():
        return SKIPPED
    started = time.monotonic()
    name = f"ipcfloor-prom-{os.getpid()}"
    engine, url = start_engine(binary, name)
    sweeping = threading.Event()
    sweeping.set()

    def sweep_loop():
        while sweeping.is_set():
            subprocess.run([binary, "sweep", "--name", name, "--grid", "6:200:20", "--quiet"],
                           stdout=subprocess.DEVNULL, timeout=60)

    sweeper = threading.Thread(target=sweep_loop)
    prometheus = None
    tmp = tempfile.TemporaryDirectory(prefix="ipcfloor-prom-")
    try:
        text, content_type = fetch(url)
        check(content_type.startswith("text/plain; version=0.0.4"), f"the endpoint's content type: {content_type}")
        promtool_ok("GET /metrics", text)
        promtool_ok("status --prometheus",
                    subprocess.run([binary, "status", "--name", name, "--prometheus"], capture_output=True,
                                   text=True, timeout=30).stdout)
        sweeper.start()
        prometheus = Prometheus(tmp.name, urllib.parse.urlparse(url).netloc)
        first = layout(fetch(url)[0])
        up = prometheus.wait_for(f'ipcfloor_up{{engine="{name}"}}', lambda v: v == [1.0], 30)
        check(up == [1.0], f"Prometheus scraped ipcfloor_up 1: {up}")
        rate_p99 = prometheus.wait_for(
            f'histogram_quantile(0.99, sum by (le) (rate(ipcfloor_service_seconds_bucket{{engine="{name}"}}[5s])))',
            lambda v: math.isfinite(v[0]) and v[0] > 0, 20)
        check(rate_p99 and math.isfinite(rate_p99[0]) and 0 < rate_p99[0] <= 8.6,
              f"histogram_quantile(0.99, rate(...)) while sweeps run: {rate_p99}")
        sweeping.clear()
        sweeper.join()
        second = layout(fetch(url)[0])
        lanes = list(first.values())
        check(len(lanes) >= 2 and all(le == lanes[0] for le in lanes) and first == second and len(lanes[0]) == 29,
              f"every lane and both scrapes have the same 29 buckets: {first} / {second}")

        # Once the sweeps stopped, Prometheus's last scrape and the segment hold the same counts.
        status = json.loads(subprocess.run([binary, "status", "--name", name, "--json"], capture_output=True,
                                           text=True, timeout=30).stdout)["service_ns"]
        count = prometheus.wait_for(f'sum(ipcfloor_service_seconds_count{{engine="{name}"}})',
                                    lambda v: v == [float(status["count"])], 10)
        check(count == [float(status["count"])], f"Prometheus's count {count} is the segment's {status['count']}")
        p99 = prometheus.query(
            f'histogram_quantile(0.99, sum by (le) (ipcfloor_service_seconds_bucket{{engine="{name}"}}))')
        bound = 1 << max(6, math.ceil(math.log2(status["p99_at_most_ns"])))
        lower = 0 if bound == 64 else bound // 2
        check(p99 and lower * 1e-9 < p99[0] <= bound * 1e-9 * (1 + 1e-9),
              f"histogram_quantile(0.99) {p99} s lies in the bucket ({lower}, {bound}] ns of the segment's p99, at "
              f"most {status['p99_at_most_ns']} ns")
        sums = prometheus.query(f'sum(ipcfloor_service_seconds_sum{{engine="{name}"}})')
        check(sums and sums[0] > 0, f"the histogram has a sum: {sums}")
        print(f"metrics_prometheus: p99 {rate_p99[0] * 1e6:.1f} us over rate(), {p99[0] * 1e6:.1f} us over the "
              f"whole histogram (segment: at most {status['p99_at_most_ns'] / 1e3:.1f} us), in "
              f"{time.monotonic() - started:.1f} s")
    finally:
        sweeping.clear()
        if sweeper.is_alive():
            sweeper.join()
        if prometheus is not None:
            log = prometheus.close()
            if "level=error" in log:
                print(f"prometheus logged:\n{log}", file=sys.stderr)
        tmp.cleanup()
        check(stop(engine) == 0, "the engine stops cleanly after the scrapes")
    return finish("metrics_prometheus: promtool accepts the exposition, the bucket layout is fixed, and Prometheus "
                  "reads a p99 with histogram_quantile")


if __name__ == "__main__":
    sys.exit(main())
