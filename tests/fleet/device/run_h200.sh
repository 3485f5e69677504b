#!/usr/bin/env bash
# Device run of the fleet campaign (the `run` tool; bundle in .device/, see docs/probes.md).
# Ray cannot be brought (its wheel is 79 MB, over the 64 MiB carry limit, and the device has no
# network), so the campaign runs through the local runner: the same cells, each host an
# interpreter on the device (the GPU one, and the same one with CUDA_VISIBLE_DEVICES="").
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/vl
t0=$(date +%s)
tar -xzf .device/vllm-py.tgz -C /tmp/vl && xz -dc .device/_C_stable_libtorch.abi3.so.xz > /tmp/vl/vllm/_C_stable_libtorch.abi3.so
echo "unpack: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$PWD/server
python3 -c "import ray" > "$OUT/ray_import.txt" 2>&1; echo "ray importable: $? (0 = yes)" | tee -a "$OUT/ray_import.txt"
nvidia-smi -L | tee "$OUT/gpus.txt"
python3 - <<'PY' > "$OUT/status.txt" 2>&1
import shutil, sys; print(sys.version); print("pip:", shutil.which("pip"), shutil.which("pip3"))
PY
t1=$(date +%s)
timeout 470 python3 -m attnlens.cli probe matrix tests/fleet/device/h200_campaign.toml --runner local \
   --root "$PWD" --cache-dir "$OUT/cache" --report-dir "$OUT/report" --format md > "$OUT/matrix_stdout.md" 2> "$OUT/matrix_stderr.txt"
echo "matrix rc=$? wall $(( $(date +%s) - t1 )) s" | tee -a "$OUT/matrix_stderr.txt"
if [ ! -s "$OUT/report/matrix.md" ]; then   # interrupted: render what the state file has
  python3 -m attnlens.cli probe matrix tests/fleet/device/h200_campaign.toml --report-only --root "$PWD" \
     --cache-dir "$OUT/cache" --report-dir "$OUT/report" > /dev/null 2>> "$OUT/matrix_stderr.txt"
fi
tail -20 "$OUT/matrix_stderr.txt"; cat "$OUT/report/matrix.md" | head -80
