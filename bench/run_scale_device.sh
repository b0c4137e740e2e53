#!/bin/bash
# The runs behind bench/results/collector_scale_*.{json,md}, on the lent GPU machine's host
# (16 CPU cores; no GPU used). Collector replicas pinned to CPUs 0-2, generators to 4-15;
# py-spy (carried as .bin/py-spy.xz) samples the one-replica collector for 15 s of its
# scrape-free half at 10,000 ranks (40 s runs: 20 s without scrapes, 20 s with; 60 s when
# scraping every 15 s), once with the code before the fleet work (.bin/prev.tar,
# `git archive b4c54ce --prefix=prev/`) and once with this one. Writes under $OUT.
set -u
P="python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade"
$P --target /tmp/site .whl/*.whl
$P --no-build-isolation --target /tmp/sw .
mkdir -p /tmp/prev && tar -xf .bin/prev.tar -C /tmp/prev && $P --no-build-isolation --target /tmp/sw_old /tmp/prev/prev
xz -dc .bin/py-spy.xz > /tmp/py-spy && chmod +x /tmp/py-spy
GEN=(--gen-procs 12 --gen-cpus 4,5,6,7,8,9,10,11,12,13,14,15)
export PYTHONUNBUFFERED=1

profiled() {  # NAME PYTHONPATH bench-args...: one run, the collector sampled by py-spy
    local name=$1 path=$2; shift 2
    PYTHONPATH=$path:/tmp/site python3 bench/collector_scale.py "${GEN[@]}" --out "$OUT/$name.json" "$@" \
        > "$OUT/$name.log" 2>&1 &
    local bench=$! pid=""
    for _ in $(seq 200); do pid=$(pgrep -f "stepwatch.collector.tools collector" | head -1); [ -n "$pid" ] && break; sleep 0.1; done
    sleep "${PROFILE_DELAY_S:-12}"
    /tmp/py-spy record --format raw -r 200 -d "${PROFILE_S:-15}" -o "$OUT/$name.pyspy.txt" -p "$pid" > "$OUT/$name.pyspy.log" 2>&1
    wait $bench
}

run() {  # NAME bench-args...: one run of this tree's collector (SW=/tmp/sw_ab: .bin/ab.tar's)
    local name=$1; shift
    PYTHONPATH=${SW:-/tmp/sw}:/tmp/site python3 bench/collector_scale.py "${GEN[@]}" --out "$OUT/$name.json" "$@" \
        > "$OUT/$name.log" 2>&1
}

ab_install() {  # .bin/ab.tar (`git archive <commit> --prefix=ab/`) installed as /tmp/sw_ab
    mkdir -p /tmp/ab && tar -xf .bin/ab.tar -C /tmp/ab && $P --no-build-isolation --target /tmp/sw_ab /tmp/ab/ab
}

code() {  # before|after -> where that code is installed (before: .bin/ab.tar's)
    [ "$1" = before ] && echo /tmp/sw_ab || echo /tmp/sw
}

ingest() {  # NAME PYTHONPATH: the collector's Python per step, in process (bench/ingest_path.py)
    PYTHONPATH=$2:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks 1000 --batches 24 --repeat 3 > "$OUT/$1.json" 2>&1
    PYTHONPATH=$2:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks 256 --batches 100 --repeat 2 >> "$OUT/$1.json" 2>&1
}

# PART=a: the one-replica 10,000-rank runs and the in-process figures; PART=b: the rest (each
# part fits one 10-minute device command); unset: both.
if [ "${PART:-a}" = a ] || [ -z "${PART:-}" ]; then
    [ -n "${SKIP_BEFORE:-}" ] || profiled before_10000 /tmp/sw_old --ranks 10000 --per-rank unset --collector-cpus 0
    profiled after_10000 /tmp/sw --ranks 10000 --collector-cpus 0
    run after_10000_scrape15 --ranks 10000 --collector-cpus 0 --scrape-every-s 15 --duration-s 60
    ingest ingest_before /tmp/sw_old
    ingest ingest_after /tmp/sw
fi
if [ "${PART:-b}" = b ] || [ -z "${PART:-}" ]; then
    run after_small --ranks 100 1000 3000 --collector-cpus 0
    run after_3replicas --ranks 10000 --replicas 3 --collector-cpus "0;1;2"
    # As Prometheus scrapes (every 15 s) rather than back to back:
    run after_3000_scrape15 --ranks 3000 --collector-cpus 0 --scrape-every-s 15 --duration-s 60
    run after_3replicas_scrape15 --ranks 10000 --replicas 3 --collector-cpus "0;1;2" --scrape-every-s 15 --duration-s 60
fi
# PART=c: steady state (30 s / 20 s of sending before measuring: the start-up burst apart), the
# collector's own garbage collections in the measured window, before/after at the same offered
# load (3,000 ranks: the code before the fleet work keeps up there).
if [ "${PART:-}" = c ]; then
    W=(--warmup-s 20 --duration-s 40)
    PYTHONPATH=/tmp/sw_old:/tmp/site python3 bench/collector_scale.py "${GEN[@]}" --out "$OUT/before_3000w.json" \
        --ranks 3000 --collector-cpus 0 --per-rank unset "${W[@]}" > "$OUT/before_3000w.log" 2>&1
    run after_3000w_unpaced --ranks 3000 --collector-cpus 0 --max-batches-per-s 0 "${W[@]}"
    run after_3000w --ranks 3000 --collector-cpus 0 "${W[@]}"
    run after_10000w --ranks 10000 --collector-cpus 0 --warmup-s 30 --duration-s 40
    run after_10000w_scrape15 --ranks 10000 --collector-cpus 0 --warmup-s 30 --duration-s 60 --scrape-every-s 15
fi
# PART=d: where the 10,000-rank ack tail comes from: the collector's loop lag and housekeeping
# (its /metrics) and the seconds late acks fall in, scraping every 15 s; 10 ranks per
# connection (as every run above) and one each (as real agents: 10,000 connections).
if [ "${PART:-}" = d ]; then
    run d_10000w_scrape15 --ranks 10000 --collector-cpus 0 --warmup-s 30 --duration-s 60 --scrape-every-s 15
    run d_10000w_scrape15_conn1 --ranks 10000 --collector-cpus 0 --warmup-s 30 --duration-s 60 --scrape-every-s 15 \
        --ranks-per-connection 1
    [ -n "${D_B2B:-}" ] && run d_10000w_b2b --ranks 10000 --collector-cpus 0 --warmup-s 30 --duration-s 40
fi
# PART=e: one connection per rank (as real agents) at a lower message ceiling, and 3,000 ranks.
if [ "${PART:-}" = e ]; then
    run e_10000w_scrape15_conn1_mb500 --ranks 10000 --collector-cpus 0 --warmup-s 30 --duration-s 60 \
        --scrape-every-s 15 --ranks-per-connection 1 --max-batches-per-s 500
    run e_3000w_scrape15_conn1 --ranks 3000 --collector-cpus 0 --warmup-s 20 --duration-s 60 --scrape-every-s 15 \
        --ranks-per-connection 1
fi
# PART=f: the table at the defaults, one connection per rank (as real agents), scraped every 15 s
# as Prometheus does (b2b: back to back).
if [ "${PART:-}" = f ]; then
    C1=(--ranks-per-connection 1 --collector-cpus 0 --scrape-every-s 15)
    run f_small_conn1 --ranks 100 1000 --warmup-s 10 --duration-s 40 "${C1[@]}"
    run f_10000w_conn1 --ranks 10000 --warmup-s 30 --duration-s 60 "${C1[@]}"
    run f_10000w_conn1_b2b --ranks 10000 --warmup-s 30 --duration-s 40 --ranks-per-connection 1 --collector-cpus 0
    [ -n "${F_REPLICAS:-}" ] && run f_10000w_conn1_3replicas --ranks 10000 --replicas 3 --warmup-s 30 --duration-s 60 \
        --ranks-per-connection 1 --collector-cpus "0;1;2" --scrape-every-s 15
fi
# PART=g: as f's 10,000-rank rows (automatic garbage collections off while the freezer runs).
if [ "${PART:-}" = g ]; then
    run g_10000w_conn1 --ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --collector-cpus 0 \
        --scrape-every-s 15
    run g_10000w_conn1_b2b --ranks 10000 --warmup-s 30 --duration-s 40 --ranks-per-connection 1 --collector-cpus 0
fi
# PART=h: A/B on one machine: .bin/ab.tar (`git archive <commit> --prefix=ab/`) against this tree.
if [ "${PART:-}" = h ]; then
    ab_install
    H=(--ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --collector-cpus 0 --scrape-every-s 15)
    for i in 1 2; do
        PYTHONPATH=/tmp/sw_ab:/tmp/site python3 bench/collector_scale.py "${GEN[@]}" --out "$OUT/h_a$i.json" "${H[@]}" \
            > "$OUT/h_a$i.log" 2>&1
        run h_b$i "${H[@]}"
    done
fi
# PART=i: three replicas at the defaults, one connection per rank, scraped every 15 s.
if [ "${PART:-}" = i ]; then
    run i_10000w_conn1_3replicas --ranks 10000 --replicas 3 --warmup-s 30 --duration-s 60 \
        --ranks-per-connection 1 --collector-cpus "0;1;2" --scrape-every-s 15
fi
# PART=j / k: /metrics rendered by a forked child (process) against on the thread (thread),
# alternated on one machine; j with the collector on one core, k on two.
if [ "${PART:-}" = j ] || [ "${PART:-}" = k ]; then
    CPUS=0; [ "$PART" = k ] && CPUS=0,1
    J=(--ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --collector-cpus $CPUS --scrape-every-s 15)
    run ${PART}_process "${J[@]}" --render process
    run ${PART}_thread "${J[@]}" --render thread
fi
# PART=l: the defaults (metrics_render auto: the thread on one core, a render process on two).
if [ "${PART:-}" = l ]; then
    L=(--ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15)
    run l_2cores_a "${L[@]}" --collector-cpus 0,1
    run l_1core "${L[@]}" --collector-cpus 0
    run l_2cores_b "${L[@]}" --collector-cpus 0,1
fi
# PART=m: the defaults again: two cores scraped back to back (a render process all the time),
# and one core twice (the thread).
if [ "${PART:-}" = m ]; then
    M=(--ranks 10000 --warmup-s 30 --ranks-per-connection 1)
    run m_2cores_b2b "${M[@]}" --duration-s 40 --collector-cpus 0,1
    run m_1core_a "${M[@]}" --duration-s 60 --scrape-every-s 15 --collector-cpus 0
    run m_1core_b "${M[@]}" --duration-s 60 --scrape-every-s 15 --collector-cpus 0
fi
# PART=n: as l's two-core row, the fork() durations read from the collector's last body.
if [ "${PART:-}" = n ]; then
    run n_2cores --ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15 \
        --collector-cpus 0,1
fi
# PART=o: the collector's Python per step in process before (b4c54ce) and after, three shapes
# (the last past the leak trend's 25-minute window and the detectors' warm-up: the steady
# state), alternated per shape; then py-spy of the collector at 10,000 ranks (one connection
# per rank, one core) before and after.
if [ "${PART:-}" = o ]; then
    for shape in "1000 24 3" "256 100 2" "256 400 1"; do
        set -- $shape
        for v in before after; do
            path=/tmp/sw; [ $v = before ] && path=/tmp/sw_old
            PYTHONPATH=$path:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks $1 --batches $2 \
                --repeat $3 >> "$OUT/o_ingest_$v.json" 2>&1
        done
    done
    profiled o_before_10000 /tmp/sw_old --ranks 10000 --ranks-per-connection 1 --per-rank unset --collector-cpus 0
    profiled o_after_10000 /tmp/sw --ranks 10000 --ranks-per-connection 1 --collector-cpus 0
fi
# PART=p: the table's rows at the defaults with this code, scraped every 15 s: 100 / 1,000 /
# 3,000 ranks and 10,000 on two cores (render process), 10,000 on one core (thread).
if [ "${PART:-}" = p ]; then
    run p_small_2cores --ranks 100 1000 3000 --warmup-s 10 --duration-s 40 --ranks-per-connection 1 \
        --collector-cpus 0,1 --scrape-every-s 15
    P2=(--ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15)
    run p_10000_2cores "${P2[@]}" --collector-cpus 0,1
    run p_10000_1core "${P2[@]}" --collector-cpus 0
fi
# PART=q: as p with the generator's samples at the agent's 1 Hz (--sample-hz, default since the
# sixth session; p sent one of each per batch), and the in-process figures with five samples of
# each kind per 5 s batch.
if [ "${PART:-}" = q ]; then
    Q=(--ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15)
    run q_10000_1core "${Q[@]}" --collector-cpus 0
    run q_10000_2cores "${Q[@]}" --collector-cpus 0,1
    run q_small_2cores --ranks 1000 3000 --warmup-s 10 --duration-s 40 --ranks-per-connection 1 \
        --collector-cpus 0,1 --scrape-every-s 15
    for v in before after; do
        path=/tmp/sw; [ $v = before ] && path=/tmp/sw_old
        PYTHONPATH=$path:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks 1000 --batches 24 \
            --samples-per-batch 5 --repeat 2 >> "$OUT/q_ingest_$v.json" 2>&1
    done
fi
# PART=r: the samples read as columns (seventh session). A/B on one lease against .bin/ab.tar
# (`git archive 55b8485 --prefix=ab/`, the code before): in process with 5 and 20 samples of each
# kind per 20-step batch (20: a paced 20 s batch at the agent's 1 Hz), the code before the
# fleet work (b4c54ce) too at 20; then 10,000 ranks on one core, before and after.
if [ "${PART:-}" = r ]; then
    ab_install
    for s in 5 20; do
        for v in ab after; do
            path=/tmp/sw; [ $v = ab ] && path=/tmp/sw_ab
            PYTHONPATH=$path:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks 1000 --batches 24 \
                --samples-per-batch $s --repeat 2 >> "$OUT/r_ingest_$v.json" 2>&1
        done
    done
    PYTHONPATH=/tmp/sw_old:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks 1000 --batches 24 \
        --samples-per-batch 20 --repeat 2 >> "$OUT/r_ingest_before.json" 2>&1
    R=(--ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15 --collector-cpus 0)
    PYTHONPATH=/tmp/sw_ab:/tmp/site python3 bench/collector_scale.py "${GEN[@]}" --out "$OUT/r_ab_10000_1core.json" \
        "${R[@]}" > "$OUT/r_ab_10000_1core.log" 2>&1
    run r_10000_1core "${R[@]}"
fi
# PART=t: as s with the code before (.bin/ab.tar), on the same lease.
if [ "${PART:-}" = t ]; then
    ab_install
    PYTHONPATH=/tmp/sw_ab:/tmp/site python3 bench/collector_scale.py "${GEN[@]}" --out "$OUT/t_ab_10000_2cores.json" \
        --ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15 --collector-cpus 0,1 \
        > "$OUT/t_ab_10000_2cores.log" 2>&1
fi
# PART=u: py-spy of the collector at 10,000 ranks on one core with samples at the agent's 1 Hz
# (this code); three replicas at 1 Hz; in process, 20 samples per batch and the steady state
# (256 x 400, 5 samples), alternated: b4c54ce (before the fleet work), .bin/ab.tar, this code.
if [ "${PART:-}" = u ]; then
    ab_install
    profiled u_after_10000_1hz /tmp/sw --ranks 10000 --ranks-per-connection 1 --collector-cpus 0
    run u_10000_3replicas --ranks 10000 --replicas 3 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 \
        --collector-cpus "0;1;2" --scrape-every-s 15
    for shape in "1000 24 2 20" "256 400 1 5"; do
        set -- $shape
        for v in before ab after; do
            path=/tmp/sw; [ $v = before ] && path=/tmp/sw_old; [ $v = ab ] && path=/tmp/sw_ab
            PYTHONPATH=$path:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks $1 --batches $2 \
                --repeat $3 --samples-per-batch $4 >> "$OUT/u_ingest_$v.json" 2>&1
        done
    done
fi
# PART=v: s twice and t once on one lease (a second lease's view of the two-core rows).
if [ "${PART:-}" = v ]; then
    for run in s1:s t:t s2:s; do  # each into its own folder (a part ends by packing its folder)
        mkdir -p "$OUT/${run%%:*}" && OUT=$OUT/${run%%:*} PART=${run##*:} bash "$0"
    done
fi
# PART=w: 1,000 and 3,000 ranks on two cores with this code (as q's small rows).
if [ "${PART:-}" = w ]; then
    run w_small_2cores --ranks 1000 3000 --warmup-s 10 --duration-s 40 --ranks-per-connection 1 \
        --collector-cpus 0,1 --scrape-every-s 15
fi
# PART=x / y: the scrape read as columns (eighth session), A/B on one lease against .bin/ab.tar
# (`git archive e5535f0 --prefix=ab/`, the code before). In process (x; y with INPROC=1): a
# scrape's CPU at 10,000 ranks on the thread and in a forked child (bench/ingest_path.py
# --scrapes [--fork]), alternated; then 10,000 ranks on one core (x) or two (y), in the order
# X_ORDER (default "ab after"; INPROC=0 skips the in-process part).
if [ "${PART:-}" = x ] || [ "${PART:-}" = y ]; then
    ab_install
    CPUS=0; [ "$PART" = y ] && CPUS=0,1
    INPROC=${INPROC:-$([ "$PART" = x ] && echo 1 || echo 0)}
    if [ "$INPROC" = 1 ]; then
        for v in ab after ab after; do
            path=/tmp/sw; [ $v = ab ] && path=/tmp/sw_ab
            for fork in "" --fork; do
                PYTHONPATH=$path:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks 10000 --batches 6 \
                    --samples-per-batch 5 --repeat 1 --scrapes 4 $fork >> "$OUT/x_scrape_$v.json" 2>&1
            done
        done
    fi
    X=(--ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15 --collector-cpus $CPUS)
    for v in ${X_ORDER:-ab after}; do  # (each name once per command)
        path=/tmp/sw; [ $v = ab ] && path=/tmp/sw_ab
        PYTHONPATH=$path:/tmp/site python3 bench/collector_scale.py "${GEN[@]}" --out "$OUT/${PART}_${v}_10000.json" \
            "${X[@]}" > "$OUT/${PART}_${v}_10000.log" 2>&1
    done
fi
# PART=z: the collector's Python per step in process (ninth session): b4c54ce (before the fleet
# work), .bin/ab.tar and this code, alternated per shape, three lanes on their own cores at
# once: 1,000 x 24 and the steady state 256 x 400 at five samples per batch (two lanes, one
# round each), and 1,000 x 24 at one and at twenty samples (a third lane). Z_SEQUENTIAL=1: the
# five-sample shapes only, twice, in one lane (parallel lanes disturbed each other's figures).
if [ "${PART:-}" = z ]; then
    ab_install
    lane() {  # CPU NAME SHAPE...: each shape (ranks batches samples) before, ab, after
        local cpu=$1 name=$2; shift 2
        for shape in "$@"; do
            set -- $shape
            for v in before ab after; do
                path=/tmp/sw; [ $v = before ] && path=/tmp/sw_old; [ $v = ab ] && path=/tmp/sw_ab
                PYTHONPATH=$path:/tmp/site taskset -c "$cpu" python3 bench/ingest_path.py --ranks $1 --batches $2 \
                    --repeat 1 --samples-per-batch $3 | sed "s/^/$v /" >> "$OUT/z_ingest_$name.json" 2>&1
            done
        done
    }
    if [ -n "${Z_SEQUENTIAL:-}" ]; then  # one lane, two rounds: the three codes in turn, nothing beside them
        lane 3 a "1000 24 5" "256 400 5"
        lane 3 b "1000 24 5" "256 400 5"
    else
        lane 3 a "1000 24 5" "256 400 5" &
        lane 9 b "256 400 5" "1000 24 5" &
        lane 6 c "1000 24 1" "1000 24 20" &
        wait
    fi
fi
# PART=T1 / T2 / T3 (tenth session): the README's table with this code, on one lease, at the
# defaults: one connection per rank, samples at the agent's 1 Hz, scraped every 15 s.
# T1: py-spy of the collector at 10,000 ranks on one core, b4c54ce and this code; the collector's
# Python per step in process, b4c54ce against this code, alternated, at 20-step batches with five
# samples (a collector of up to 2,500 agents) and at the 80-step batches with 20 samples per 20 s that
# a collector of 10,000 ranks asks for, each at a fleet's start and at the steady state.
# T2: 100 / 1,000 / 3,000 ranks on two cores; 10,000 on two cores and on one.
# T3: three replicas, one core each; 10,000 ranks on one core again.
if [ "${PART:-}" = T1 ]; then
    profiled T1_before_10000 /tmp/sw_old --ranks 10000 --ranks-per-connection 1 --per-rank unset --collector-cpus 0
    profiled T1_after_10000 /tmp/sw --ranks 10000 --ranks-per-connection 1 --collector-cpus 0
    for shape in "1000 24 5 20 5" "1000 6 20 80 20" "256 400 5 20 5" "256 100 20 80 20"; do
        set -- $shape
        for v in before after; do
            path=/tmp/sw; [ $v = before ] && path=/tmp/sw_old
            PYTHONPATH=$path:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks $1 --batches $2 --repeat 1 \
                --samples-per-batch $3 --steps-per-batch $4 --batch-s $5 | sed "s/^/$v /" >> "$OUT/T1_ingest.json" 2>&1
        done
    done
fi
T=(--warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15)
if [ "${PART:-}" = T2 ]; then
    run T2_small_2cores --ranks 100 1000 3000 --warmup-s 10 --duration-s 40 --ranks-per-connection 1 \
        --collector-cpus 0,1 --scrape-every-s 15
    run T2_10000_2cores --ranks 10000 "${T[@]}" --collector-cpus 0,1
    run T2_10000_1core --ranks 10000 "${T[@]}" --collector-cpus 0
fi
# T4: T1's first profile again (its generator failed on the old code's missing pacing module), and
# 10,000 ranks on one core a third time.
if [ "${PART:-}" = T4 ]; then
    profiled T4_before_10000 /tmp/sw_old --ranks 10000 --ranks-per-connection 1 --per-rank unset --collector-cpus 0
    run T4_10000_1core --ranks 10000 "${T[@]}" --collector-cpus 0
fi
# T5: T1's in-process figures at the 20-step, five-sample batches again, three rounds, before and
# after alternated in one lane (T1 had one run per shape).
if [ "${PART:-}" = T5 ]; then
    for round in 1 2 3; do
        for shape in "1000 24" "256 400"; do
            set -- $shape
            for v in before after; do
                path=/tmp/sw; [ $v = before ] && path=/tmp/sw_old
                PYTHONPATH=$path:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks $1 --batches $2 --repeat 1 \
                    --samples-per-batch 5 | sed "s/^/$round $v /" >> "$OUT/T5_ingest.json" 2>&1
            done
        done
    done
fi
# T6: py-spy of this code at 10,000 ranks on one core in the steady state: after the 30 s warm-up
# (the start-up burst and the first unpaced batches), 20 s of the half without scrapes.
if [ "${PART:-}" = T6 ]; then
    PROFILE_DELAY_S=48 PROFILE_S=20 profiled T6_after_10000_steady /tmp/sw --ranks 10000 "${T[@]}" --collector-cpus 0
fi
# T7: where one core's acks go late while scraped: 10,000 and 12,000 ranks (ingest nearer 0.8
# core) on one core, the scrapes' sleep (scrape_yield_s) recorded.
if [ "${PART:-}" = T7 ]; then
    run T7_12000_1core --ranks 12000 "${T[@]}" --collector-cpus 0
    run T7_10000_1core --ranks 10000 "${T[@]}" --collector-cpus 0
fi
# T8: the scrape's sleeps spread inside its timeout (65e3f7e) against the code before (.bin/ab.tar:
# `git archive 7c9dfd6 --prefix=ab/`), one core, the generator sending Prometheus's 10 s timeout:
# T8a at 14,000 ranks (ingest near 0.8 core, as T6's slower machine had at 10,000), T8b at 10,000.
if [ "${PART:-}" = T8a ] || [ "${PART:-}" = T8b ]; then
    ab_install
    N=$([ "$PART" = T8a ] && echo 14000 || echo 10000)
    for who in before after; do
        SW=$(code $who) run "${PART}_${who}_$N" --ranks $N "${T[@]}" --collector-cpus 0
    done
fi
# T8c: a scraper with a short timeout (4 s), 14,000 ranks on one core, before and after; then the
# collector's Python per step in process (20-step, five-sample batches at a fleet's start),
# b4c54ce against this tree, alternated, three rounds.
if [ "${PART:-}" = T8c ]; then
    ab_install
    for who in before after; do
        SW=$(code $who) run T8c_${who}_14000_t4 --ranks 14000 "${T[@]}" --scrape-timeout-s 4 --collector-cpus 0
    done
    for i in 1 2 3; do
        for sw in /tmp/sw_old /tmp/sw; do
            PYTHONPATH=$sw:/tmp/site taskset -c 3 python3 bench/ingest_path.py --ranks 1000 --batches 24 \
                --samples-per-batch 5 --repeat 1 | sed "s|^|$sw |" >> "$OUT/T8c_ingest.json"
        done
    done
fi
# T8d: the rule as kept (sleeps stop only when the rest of the render just fits before the
# deadline), 14,000 ranks on one core: before and after with a 4 s timeout, after with 10 s.
if [ "${PART:-}" = T8d ]; then
    ab_install
    for one in before_t4 after_t4 after_t10; do
        SW=$(code "${one%_*}") run T8d_$one --ranks 14000 "${T[@]}" --scrape-timeout-s "${one##*_t}" --collector-cpus 0
    done
fi
# T8e: T6's regime made on purpose: 16,000 ranks on one core (ingest near 0.85-0.9 core), the
# default 10 s timeout, before (a fixed 5 s of sleep) and after (sleeps until the deadline needs
# the rest of the render). Run twice, the second time after first.
if [ "${PART:-}" = T8e ]; then
    ab_install
    for who in ${T8E_ORDER:-before after}; do  # (T8E_ORDER="after before": the other order)
        SW=$(code $who) run T8e_${who}_16000 --ranks 16000 "${T[@]}" --collector-cpus 0
    done
fi
# T8f: the rule kept at 10,000 ranks on one core, then a third T8e pair (before first).
if [ "${PART:-}" = T8f ]; then
    ab_install
    run T8f_after_10000 --ranks 10000 "${T[@]}" --collector-cpus 0
    for who in before after; do
        SW=$(code $who) run T8f_${who}_16000 --ranks 16000 "${T[@]}" --collector-cpus 0
    done
fi
# T8g: the final code at 10,000 ranks on one core, twice.
if [ "${PART:-}" = T8g ]; then
    run T8g_10000_a --ranks 10000 "${T[@]}" --collector-cpus 0
    run T8g_10000_b --ranks 10000 "${T[@]}" --collector-cpus 0
fi
if [ "${PART:-}" = T3 ]; then
    run T3_10000_3replicas --ranks 10000 --replicas 3 "${T[@]}" --collector-cpus "0;1;2"
    run T3_10000_1core --ranks 10000 "${T[@]}" --collector-cpus 0
fi
# PART=s: 10,000 ranks on two cores with this code (as q's row).
if [ "${PART:-}" = s ]; then
    run s_10000_2cores --ranks 10000 --warmup-s 30 --duration-s 60 --ranks-per-connection 1 --scrape-every-s 15 \
        --collector-cpus 0,1
fi
for f in T8g_10000_a T8g_10000_b T8f_after_10000 T8f_before_16000 T8f_after_16000 T8e_before_16000 T8e_after_16000 T8d_before_t4 T8d_after_t4 T8d_after_t10 T8c_before_14000_t4 T8c_after_14000_t4 T8a_before_14000 T8a_after_14000 T8b_before_10000 T8b_after_10000 T7_12000_1core T7_10000_1core T6_after_10000_steady T1_before_10000 T1_after_10000 T2_small_2cores T2_10000_2cores T2_10000_1core T3_10000_3replicas T3_10000_1core T4_before_10000 T4_10000_1core x_ab_10000 x_after_10000 y_ab_10000 y_after_10000 w_small_2cores u_10000_3replicas t_ab_10000_2cores r_ab_10000_1core r_10000_1core s_10000_2cores q_10000_1core q_10000_2cores q_small_2cores p_small_2cores p_10000_2cores p_10000_1core o_before_10000 o_after_10000 n_2cores m_2cores_b2b m_1core_a m_1core_b l_2cores_a l_1core l_2cores_b j_process j_thread k_process k_thread i_10000w_conn1_3replicas h_a1 h_b1 h_a2 h_b2 g_10000w_conn1 g_10000w_conn1_b2b f_small_conn1 f_10000w_conn1 f_10000w_conn1_b2b f_10000w_conn1_3replicas e_10000w_scrape15_conn1_mb500 e_3000w_scrape15_conn1 d_10000w_scrape15 d_10000w_scrape15_conn1 d_10000w_b2b before_3000w after_3000w_unpaced after_3000w after_10000w after_10000w_scrape15 before_10000 after_10000 after_10000_scrape15 after_small after_3replicas after_3000_scrape15 after_3replicas_scrape15; do
    [ -f "$OUT/$f.log" ] && tail -n +3 "$OUT/$f.log" | grep "^| [0-9]" | sed "s/^/$f /"
done
for f in T8c_ingest T5_ingest T1_ingest z_ingest_a z_ingest_b z_ingest_c x_scrape_ab x_scrape_after u_ingest_before u_ingest_ab u_ingest_after r_ingest_ab r_ingest_after r_ingest_before q_ingest_before q_ingest_after o_ingest_before o_ingest_after ingest_before ingest_after; do [ -f "$OUT/$f.json" ] && sed "s/^/$f /" "$OUT/$f.json"; done
tar -czf "$OUT/scale_runs.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v scale_runs.tgz) && (cd "$OUT" && ls | grep -v scale_runs.tgz | xargs rm -f)
