"""Cold import time of the gateway's Lambda handler module, in fresh interpreters."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

RUNS = 5
SNIPPET = "import time; t = time.perf_counter(); import functions.gateway.app; print(time.perf_counter() - t)"


def run() -> list[tuple[str, str, str]]:
    env = {
        **os.environ,
        "SATELLITE_CATALOG_TABLE": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-c", SNIPPET], env=env, check=True, capture_output=True)
    samples = [
        float(
            subprocess.run([sys.executable, "-c", SNIPPET], env=env, check=True, capture_output=True, text=True).stdout
        )
        for _ in range(RUNS)
    ]
    return [
        ("handler import (cold process, bytecode cached)", f"{1000 * statistics.median(samples):.0f} ms", "<= 400 ms")
    ]
