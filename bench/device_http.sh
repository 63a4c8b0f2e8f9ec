#!/usr/bin/env bash
# Issue 33's many-core table with the daemon over HTTP (bench/device_http.py says what it measures), on a host
# where nothing can be installed: run from the repository root with .devbench/esdev.tar.gz beside it
# (bench/devbench-pack.sh: the daemon, bench_svd, wrk and nginx with their own loader and libraries). Unpacks
# it into /tmp/esdev, then runs the measurements with the host's python3 (numpy, scikit-learn, threadpoolctl).
# Everything goes to stdout and to $OUT (default /tmp/esdev-out): device-http.md, device-http-runs.jsonl,
# device-http-logs.txt. DEVICE_BUDGET_S (default 420) bounds the whole run, unpacking included: a step that
# would start too late is skipped and says so. For a local try: DEVICE_SIZES="8192x256 16384x512"
# DEVICE_WRK_SECONDS=1.
set -uo pipefail
export DEVICE_T0=${DEVICE_T0:-$(date +%s.%N)}
export ESDEV=${ESDEV:-/tmp/esdev}
mkdir -p "$ESDEV"
tar -C "$ESDEV" -xzf .devbench/esdev.tar.gz || { echo "device_http: cannot unpack .devbench/esdev.tar.gz (bench/devbench-pack.sh)" >&2; exit 1; }
exec "${PYTHON:-python3}" bench/device_http.py
