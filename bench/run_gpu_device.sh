#!/bin/bash
# Set-up on the lent GPU machine (its image has torch, pytest, pyyaml, pynvml; carried: .whl/
# grpcio + protobuf wheels, .bin/ prometheus and alertmanager), then one of:
#   bash bench/run_gpu_device.sh tests [PATHS]  # the tests/gpu suite (or PATHS), log and table under $OUT
#   bash bench/run_gpu_device.sh diagnosis ARGS...   # bench/diagnosis.py --device cuda ARGS
set -u
source bench/device_install.sh
for b in prometheus prometheus-alertmanager; do
    [ -f .bin/$b.xz ] && xz -dc .bin/$b.xz > /usr/local/bin/$b && chmod +x /usr/local/bin/$b
done
mkdir -p /usr/share/prometheus/alertmanager && cp .bin/*.tmpl /usr/share/prometheus/alertmanager/ 2>/dev/null
export STEPWATCH_DEPLOY_DIR=$PWD/deploy
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
what=$1; shift
case $what in
tests)  # [PATHS...]: those tests (default: tests/gpu)
    [ $# -gt 0 ] || set -- tests/gpu
    OUT=$OUT python3 -m pytest -q -s -p no:cacheprovider -W ignore "$@" > "$OUT/gpu_tests.txt" 2>&1
    grep -E "passed|failed|^(FAILED|ERROR)" "$OUT/gpu_tests.txt" | tail -15 ;;
diagnosis)
    python3 bench/diagnosis.py --device cuda --out "$OUT/diagnosis_gpu.json" --md "$OUT/diagnosis_gpu.md" "$@" \
        > "$OUT/diagnosis_gpu.log" 2>&1
    tail -30 "$OUT/diagnosis_gpu.log" ;;
esac
