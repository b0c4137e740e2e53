# Sourced by bench/run_gpu_device.sh and bench/run_real_device.sh on a lent GPU machine: the
# carried wheels (.whl/: grpcio, grpcio-health-checking, protobuf) into /tmp/site and this
# package into /tmp/sw, once per machine whichever script runs first (jobs of either may be
# running: a second install would rewrite their files), then PYTHONPATH for both.
P="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade"
(
    flock 9
    if [ ! -f /tmp/sw.done ]; then
        $P --target /tmp/site .whl/*.whl >/dev/null 2>&1
        $P --no-build-isolation --target /tmp/sw . >/dev/null 2>&1
        touch /tmp/sw.done
    fi
) 9>/tmp/sw.lock
export PYTHONPATH=/tmp/sw:/tmp/site PYTHONUNBUFFERED=1
