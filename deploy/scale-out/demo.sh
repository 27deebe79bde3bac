#!/usr/bin/env bash
# tacit serve beyond one process, on this machine, in a minute or two: a NATS server with
# JetStream (the shared log), a Dask scheduler and two workers, two ingest replicas and the
# reconstruct role, each a process of its own (the command each runs is printed as it starts).
# A simulated stream, every call's trace context lost (so that each round has every call to
# infer, on the workers), goes to both replicas in turn; one replica and one worker are killed
# (kill -9) mid-stream; then one process is given the same requests and the two stores are
# compared. Prints one JSON line:
#   {"sent": ..., "acknowledged": ..., "stored": ..., "identical_to_single_process": ...,
#    "windows_stored_twice": ...}
# Usage: deploy/scale-out/demo.sh [OUT_DIR]   (default: scale-out-demo; its stores and the
# processes' logs stay there). Needs nats-server (Debian: apt install nats-server).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-scale-out-demo}
if ! command -v nats-server >/dev/null; then
  echo "demo.sh: needs nats-server (Debian: apt install nats-server)" >&2
  exit 2
fi
make --no-print-directory install >&2
.venv/bin/tacit experiment scale-out --out "$out" --seconds 20 --kill replica,worker --lost-context --json |
  .venv/bin/python -c '
import json, sys
run = json.load(sys.stdin)
keys = ("sent", "acknowledged", "stored", "identical_to_single_process", "windows_stored_twice")
print(json.dumps({k: run[k] for k in keys}))'
