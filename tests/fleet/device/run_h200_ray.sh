#!/usr/bin/env bash
# Device run of the fleet campaign THROUGH RAY (the `run` tool; see docs/probes.md "H200 through Ray").
#
# What travels does not fit in one call (64 MiB): the pruned Ray 2.60.0 site (cp312, with its
# pure-Python deps; .device/ray/site-ray.tar.xz, 20 MB) and vLLM's sources (.device/vllm-py.tgz,
# 7 MB) in one call, vLLM's compiled ops (.device/_C_stable_libtorch.abi3.so.xz, 56 MB) in the next.
# Every call of this script unpacks what it was carried into .device/persist/ (ignored, so it stays
# in the repo copy while the machine is warm) and runs the campaign once all parts are there.
#   call 1: carry [".device/ray", ".device/vllm-py.tgz"]             -> unpacks, checks `import ray`
#   call 2: carry [".device/_C_stable_libtorch.abi3.so.xz"]           -> unpacks, runs the campaign
# (call 3, only if the machine was released in between: carry the part that is missing again.)
# The campaign: a Ray head with the GPU (resource gpu_host) and a second Ray node beside it with
# CUDA_VISIBLE_DEVICES="" (resource cpu_host), tests/fleet/device/h200_campaign_ray.toml.
# Making .device/ray/site-ray.tar.xz (here, with network):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d W \
#     ray==2.60.0 click filelock jsonschema attrs referencing rpds-py jsonschema-specifications msgpack protobuf \
#     pyyaml requests urllib3 idna certifi charset-normalizer packaging typing-extensions
#   mkdir S && cd S && for w in W/*.whl; do unzip -q -o $w; done
#   rm -rf ray/jars ray/dashboard/client/build ray/rllib ray/tune ray/train ray/serve ray/data ray/llm
#   find . -name __pycache__ -prune -exec rm -rf {} +; find . -type d -name tests -prune -exec rm -rf {} +
#   strip --strip-unneeded ray/_raylet.so ray/core/src/ray/raylet/raylet ray/core/src/ray/gcs/gcs_server
#   tar -cf - . | xz -T2 -9e > .device/ray/site-ray.tar.xz          # 117 MB -> 20.5 MB
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
P=$PWD/.device/persist; W=/tmp/attnlens-ray; mkdir -p "$P" "$W"
INFO=$OUT/info.txt
ts() { date +%s.%N; }
dt() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
{ echo "boot_id $(cat /proc/sys/kernel/random/boot_id) host $(hostname) $(date -u +%FT%TZ)"
  echo "persist before this call: $(ls "$P" 2>/dev/null | tr '\n' ' ')"; } | tee "$INFO"
t0=$(ts)
if [ -f .device/ray/site-ray.tar.xz ] && [ ! -f "$P/site-ray.ok" ]; then
  rm -rf "$P/site-ray"; mkdir -p "$P/site-ray" && xz -T8 -dc .device/ray/site-ray.tar.xz | tar -xf - -C "$P/site-ray" \
    && touch "$P/site-ray.ok"; echo "unpacked Ray site ($(du -sh "$P/site-ray" | cut -f1))" | tee -a "$INFO"
fi
if [ -f .device/vllm-py.tgz ] && [ ! -f "$P/vl-py.ok" ]; then
  mkdir -p "$P/vl" && tar -xzf .device/vllm-py.tgz -C "$P/vl" && touch "$P/vl-py.ok"; echo "unpacked vLLM sources" | tee -a "$INFO"
fi
if [ -f .device/_C_stable_libtorch.abi3.so.xz ] && [ ! -f "$P/vl-so.ok" ]; then
  mkdir -p "$P/vl/vllm" && xz -T8 -dc .device/_C_stable_libtorch.abi3.so.xz > "$P/vl/vllm/_C_stable_libtorch.abi3.so" \
    && touch "$P/vl-so.ok"; echo "unpacked _C_stable_libtorch.abi3.so" | tee -a "$INFO"
fi
echo "unpack: $(dt "$t0" "$(ts)") s; persist now: $(ls "$P" | tr '\n' ' ')" | tee -a "$INFO"
export PYTHONPATH=$P/site-ray:$PWD/server RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
if [ -f "$P/site-ray.ok" ]; then
  python3 -c "import sys, ray, google.protobuf as pb; print(sys.version.split()[0], 'ray', ray.__version__, ray.__file__, 'protobuf', pb.__version__)" 2>&1 | tee -a "$INFO"
fi
missing=""; for m in site-ray vl-py vl-so; do [ -f "$P/$m.ok" ] || missing="$missing $m"; done
if [ -n "$missing" ]; then echo "not all parts here yet (missing:$missing): carry them in the next call" | tee -a "$INFO"; exit 0; fi

ln -sfn "$P/vl" /tmp/vl
RAY="python3 -m ray.scripts.scripts"
ls -la ~/.ray 2>/dev/null | tee -a "$INFO"
t1=$(ts)
timeout 120 $RAY start --head --port=6379 --num-cpus=8 --num-gpus=1 --resources='{"gpu_host": 1}' \
  --object-store-memory=200000000 --include-dashboard=false --disable-usage-stats > "$W/ray_head.txt" 2>&1
echo "ray start --head rc=$? $(dt "$t1" "$(ts)") s" | tee -a "$INFO"
t2=$(ts)
CUDA_VISIBLE_DEVICES="" timeout 120 $RAY start --address=127.0.0.1:6379 --num-cpus=4 --num-gpus=0 \
  --resources='{"cpu_host": 1}' --object-store-memory=200000000 --disable-usage-stats > "$W/ray_cpu.txt" 2>&1
echo "ray start (cpu node) rc=$? $(dt "$t2" "$(ts)") s" | tee -a "$INFO"
# (`ray status` shows the autoscaler's last view: a node that joined a second ago may be missing there)
timeout 60 $RAY status --address=127.0.0.1:6379 > "$W/ray_status.txt" 2>&1
{ echo "== ray start --head"; cat "$W/ray_head.txt"; echo "== ray start (cpu node)"; cat "$W/ray_cpu.txt"
  echo "== ray status"; cat "$W/ray_status.txt"; } > "$OUT/ray_start.txt"
cat "$W/ray_status.txt"
t3=$(ts)
timeout 230 python3 -m attnlens.cli probe matrix tests/fleet/device/h200_campaign_ray.toml --ray-address 127.0.0.1:6379 \
   --root "$PWD" --cache-dir "$W/cache" --report-dir "$OUT/report" --format md > "$W/matrix_stdout.md" 2> "$OUT/campaign_log.txt"
echo "matrix rc=$? wall $(dt "$t3" "$(ts)") s" | tee -a "$OUT/campaign_log.txt" "$INFO"
if [ ! -s "$OUT/report/matrix.md" ]; then   # interrupted: render what the state file has
  python3 -m attnlens.cli probe matrix tests/fleet/device/h200_campaign_ray.toml --report-only --root "$PWD" \
     --cache-dir "$W/cache" --report-dir "$OUT/report" > /dev/null 2>> "$OUT/campaign_log.txt"
fi
st=$(find "$W/cache" -path '*fleet*' -name '*.json' | head -1); [ -n "$st" ] && cp "$st" "$OUT/state.json"
t4=$(ts)
timeout 60 $RAY stop --force > "$W/ray_stop.txt" 2>&1; echo "ray stop rc=$? $(dt "$t4" "$(ts)") s" | tee -a "$INFO"
tar -czf "$OUT/ray_logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null
[ "$(stat -c %s "$OUT/ray_logs.tgz" 2>/dev/null || echo 0)" -gt 15000000 ] && rm -f "$OUT/ray_logs.tgz"
echo "whole script: $(dt "$t0" "$(ts)") s" | tee -a "$INFO"
tail -25 "$OUT/campaign_log.txt"; head -60 "$OUT/report/matrix.md"
