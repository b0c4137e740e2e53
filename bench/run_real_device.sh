#!/bin/bash
# Real GPU jobs on a lent 4-GPU machine: the recording corpus (tests/data/real) and the
# window after-effect A/B (issue: the profiler never leaves the job slower).
#   setsid bash bench/run_real_device.sh corpus-start 660 &   # 3 jobs side by side, one collector each
#   bash bench/run_real_device.sh ab 100        # A/B arms alternated per GPU slot
#   bash bench/run_real_device.sh live SIZE SECONDS   # one healthy 1-GPU job at defaults
#   bash bench/run_real_device.sh pair-start S1 S2 SECONDS  # 2-GPU machine: two 1-GPU jobs, detached
#   bash bench/run_real_device.sh ddp-start SIZE SECONDS    # 2-GPU machine: one NCCL DDP job, detached
#   bash bench/run_real_device.sh wait-pack PREFIX          # wait for the detached jobs, then pack
#   bash bench/run_real_device.sh pack [PREFIX] # $OUT/real.tgz: recordings, the jobs' own step
#                                               # clocks, /api/alerts and /api/jobs, logs
# Carried: .whl/ (grpcio, grpcio-health-checking, protobuf). Software only: no GPU setting is
# touched. The device call copies the working tree (64 MiB at most): with the recordings under
# bench/results the tracked files are ~65 MB, so move bench/results aside for the call (nothing
# here reads it) and back after, before any commit. On 2026-11-30 the rest was 58.5 MB and the
# wheels 6.9 MB, 1.7 MB under the limit: when it no longer fits, move tests/data/real aside too
# (56 MB of recordings; no verb and no GPU test reads them). Collectors run on their own cores (taskset), trainers on the rest.
# Detached jobs live only while the machine is held: it goes back about 30 s after a device
# call returns, and a fresh machine has no /tmp/real: end each waiting call with sleep-pack. Make the wait calls back to back, with
# nothing slow between them (a 4-minute step between two waits lost three finished jobs). Even
# back to back, a second call has found a fresh machine (2026-12-03: a 20-minute pulses job lost at
# 484 s, real_h200zk.md): a job longer than one call (600 s) is a gamble; prefer jobs that fit one.
# Issuing the calls of such a job together does not help when the first gets no machine: the
# next ones then start a fresh machine and wait for a job that never started (real_h200zl.md).
# What worked (real_h200zm.md, a 17.7-minute job in three calls): issue them in one batch, so
# each follows the last with no gap, and begin every call after the first with a guard,
#   [ -f /tmp/real/NAME.run.log ] || exit 3; ...
# so that a call on a fresh machine costs its start, not its wait.
# Budget: a four-cause pulses job (~17 minutes) needs ~1,100 s of commands in two calls plus the
# machine's start, which has taken 90-700 s of the lease (real_h100v.md: 1,252 s held for 551 s of
# command): start one only with 1,500 s or more of device time left; end each call with pack-until.
#   bash bench/run_real_device.sh inject2 NAME PORT GPUS SIZE SECS CAUSE RANK AT [RATIO]  # DDP, a cause on RANK at AT s
#   bash bench/run_real_device.sh inject1 NAME PORT GPU SIZE SECS CAUSE AT [RATIO]        # 1 GPU, a cause at AT s
#   bash bench/run_real_device.sh phase-ab PORT GPU SIZE SECS    # phase times: none/off/default/every step
#   bash bench/run_real_device.sh slots "CMDS" "CMDS" ...        # each a detached sequence of the above
#                                                                # (';'-separated verbs), then wait-pack
#   bash bench/run_real_device.sh rounds "V|V" "V" ...           # rounds one after the other, each its
#                                                                # '|'-separated verbs side by side
#   bash bench/run_real_device.sh gputests NAME GPUS PATHS...    # pytest on those GPUs (a verb for rounds)
#   bash bench/run_real_device.sh probe NAME GPUS SIZE [ARGS...] # bench/collective_timing_probe.py, a rank a GPU
#   bash bench/run_real_device.sh pack-until NAME PREFIX SECONDS   # pack every 50 s until NAME is done
#   bash bench/run_real_device.sh restarts-start NAME SIZE SECS AFTER CAUSES RESTARTS  # pulses, the collector
#                                                                # killed and restarted on its state_dir at RESTARTS s
set -u
source bench/device_install.sh
W=/tmp/real; case $1 in *-start|live|slots|rounds|latin) rm -rf $W ;; esac  # ('after' keeps it)
mkdir -p $W
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $W/gpus.txt
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])" | tee -a $W/gpus.txt
NCPU=$(nproc)

collector() {  # NAME PORT: a collector recording to $W/NAME.jsonl on the last cores (STATE=DIR: its state_dir)
    taskset -c $((NCPU - 1 - ($2 % 4))) python3 -m stepwatch.collector.tools collector \
        --grpc-listen 127.0.0.1:$((7400 + $2 * 2)) --http-listen 127.0.0.1:$((7401 + $2 * 2)) \
        ${STATE:+--state-dir $STATE} --record $W/$1.jsonl > $W/$1.collector.log 2>&1 &
    echo $! > $W/$1.collector.pid
    sleep 3
}

tarball() {  # PREFIX: $OUT/real.tgz of gpus.txt and $W's files whose names start with PREFIX (all: "")
    (cd $W && tar czf $OUT/real.tgz gpus.txt ${1:-}*)
}

finish() {  # NAME PORT: alerts (active and resolved) and jobs, then stop the collector
    snapshot "$1" "$2"
    kill -TERM $(cat $W/$1.collector.pid) 2>/dev/null; sleep 2
    gzip -9 -f $W/$1.jsonl 2>/dev/null
}

snapshot() {  # NAME PORT: the collector's alerts (active and resolved) and jobs into $W/NAME.*.json
    python3 - "$1" "$((7401 + $2 * 2))" <<'EOF'
import json, sys, urllib.request
name, port = sys.argv[1], sys.argv[2]
for path in ("api/alerts", "api/jobs"):
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=10).read()
    except Exception as exc:
        body = json.dumps({"error": repr(exc)}).encode()
    open(f"/tmp/real/{name}.{path.split('/')[1]}.json", "wb").write(body)
print(name, "alerts:", open(f"/tmp/real/{name}.alerts.json").read()[:1500])
EOF
}

job1() {  # NAME PORT GPU SIZE SECONDS [job args...]: one 1-GPU job
    local name=$1 port=$2 gpu=$3 size=$4 secs=$5; shift 5
    CUDA_VISIBLE_DEVICES=$gpu STEPWATCH_COLLECTOR=127.0.0.1:$((7400 + port * 2)) \
        python3 bench/real_job.py --size $size --duration-s $secs --job $name \
        --steps-out $W/$name.steps.json "$@" > $W/$name.log 2>&1
}

job2() {  # NAME PORT GPUS SIZE SECONDS [job args...]: 2-GPU NCCL DDP under torchrun
    local name=$1 port=$2 gpus=$3 size=$4 secs=$5; shift 5
    CUDA_VISIBLE_DEVICES=$gpus STEPWATCH_COLLECTOR=127.0.0.1:$((7400 + port * 2)) \
        python3 -m torch.distributed.run --nproc_per_node 2 --master_port $((29500 + port)) \
        bench/real_job.py --size $size --duration-s $secs --job $name \
        --steps-out $W/$name.steps.r{rank}.json "$@" > $W/$name.log 2>&1
}

armed() {  # AT: a cause injected before the collector's drift detector is armed (warmup_s 60 +
           # settle_s 120 of job time) is learnt as the job's level and never raised: refused
    if [ "${1%.*}" -lt 190 ]; then
        echo "inject at $1 s: the drift detector arms at 180 s of job time; inject at 190 s or later" >&2
        exit 2
    fi
}

what=$1; shift
case $what in
corpus-start)
    # Started detached (the jobs outlive this command: 11 minutes, longer than one command may
    # run); `corpus-end` on the same warm machine waits for them and packs the results.
    tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[12]00' | tr H h)
    echo $tag > $W/tag
    collector ${tag}_1gpu_s 0; collector ${tag}_1gpu_m_pauses 1; collector ${tag}_2gpu_m 2
    job1 ${tag}_1gpu_s 0 0 s "$1" &
    job1 ${tag}_1gpu_m_pauses 1 1 m "$1" --eval-every-s 150 --eval-s 4 --ckpt-every-s 200 &
    job2 ${tag}_2gpu_m 2 2,3 m "$1" &
    wait
    finish ${tag}_1gpu_s 0; finish ${tag}_1gpu_m_pauses 1; finish ${tag}_2gpu_m 2
    touch $W/corpus.done ;;
ab)
    # Slot A (GPUs 0,1, 2-GPU DDP ~40 ms) and slots B, C (GPU 2, GPU 3, 1-GPU ~40 ms): arms
    # of $1 s in alternated orders, each its own collector; the jobs' own clocks are compared.
    secs=$1; shift
    slot() {  # SLOT PORT GPU(S) ARMS...
        local s=$1 port=$2 g=$3; shift 3; local i=0
        for arm in "$@"; do
            i=$((i + 1)); local n=ab_${s}${i}_$arm
            collector $n $port
            (
                extra=()
                case $arm in
                    none) extra=(--agent none) ;; off) export STEPWATCH_WINDOWS=0 ;;
                    cuda) export STEPWATCH_WINDOWS=scheduled STEPWATCH_WINDOW_ACTIVITIES=cuda ;;
                    cpu) export STEPWATCH_WINDOWS=scheduled STEPWATCH_WINDOW_ACTIVITIES=cpu ;;
                    teardown0) export STEPWATCH_WINDOWS=scheduled TEARDOWN_CUPTI=0 ;;
                esac
                if [ $s = A ]; then job2 $n $port $g m $secs "${extra[@]}"
                else job1 $n $port $g m $secs "${extra[@]}"; fi
            )
            finish $n $port
        done
    }
    slot A 3 0,1 ${ARMS_A:-none default off default} &
    slot B 4 2 ${ARMS_B:-default none cuda teardown0} &
    slot C 5 3 ${ARMS_C:-none default cpu default} &
    wait ;;
live)
    collector live_$1 0
    job1 live_$1 0 0 "$1" "$2"
    finish live_$1 0
    touch $W/live.done ;;
pair-start)  # S1 on GPU 0, S2 on GPU 1, SECONDS each; names <card>_1gpu_<size>[2]
    tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[12]00' | tr H h)
    a=${tag}_1gpu_$1; b=${tag}_1gpu_$2; [ $a = $b ] && b=${b}2
    collector $a 0; collector $b 1
    (job1 $a 0 0 $1 $3; finish $a 0; touch $W/$a.done) > $W/$a.run.log 2>&1 &
    (job1 $b 1 1 $2 $3; finish $b 1; touch $W/$b.done) > $W/$b.run.log 2>&1 &
    sleep 5; echo started $a $b ;;
ddp-start)  # one 2-GPU NCCL DDP job of SIZE for SECONDS
    tag=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[12]00' | tr H h)
    n=${tag}_2gpu_$1
    collector $n 2
    (job2 $n 2 0,1 $1 $2; finish $n 2; touch $W/$n.done) > $W/$n.run.log 2>&1 &
    sleep 5; echo started $n ;;
inject2)  # NAME PORT GPUS SIZE SECS CAUSE RANK AT [RATIO]: a DDP job, CAUSE on RANK from AT s
    armed $8
    collector $1 $2
    job2 $1 $2 $3 $4 $5 --inject $6 --inject-rank $7 --inject-after-s $8 --inject-ratio ${9:-0.15} \
        ${BATCH:+--batch $BATCH}  # BATCH=N fixes the batch (a host cost shows only where the GPU queue is short)
    finish $1 $2 ;;
inject1)  # NAME PORT GPU SIZE SECS CAUSE AT [RATIO]: a 1-GPU job, CAUSE from AT s
    armed $7
    collector $1 $2
    job1 $1 $2 $3 $4 $5 --inject $6 --inject-after-s $7 --inject-ratio ${8:-0.15} ${BATCH:+--batch $BATCH}
    finish $1 $2 ;;
ddp-arms)  # NAME PORT GPUS SIZE SECS ARMS...: healthy arms one after the other, a 2-GPU DDP
           # job where GPUS is a pair ("2,3"), a 1-GPU job where it is one GPU ("0")
           # (none: no agent; default (windows on demand); sched: windows on the schedule; off:
           # windows off; nophase: phase times off; nogpm: no GPM counters; warmonly: the warm-up
           # profiler session and no window after it; cpuwin / cudawin: scheduled windows, CPU or
           # CUDA activity only; td0 / td1: scheduled windows with TEARDOWN_CUPTI=0 / 1; noexport:
           # scheduled windows whose traces are not exported (nor analysed); bare:
           # the step hook, IPC and sidecar only), each its
           # own collector; BATCH=N (or BATCH_<size>=N for one size)
           # fixes the batch (calibration chose 6 for one arm and 8 for the others on an H200);
           # JOB_ARGS="..." is added to every arm's real_job.py arguments (a cause schedule)
    name=$1 port=$2 gpus=$3 size=$4 secs=$5; shift 5; i=0
    for arm in "$@"; do
        i=$((i + 1)); n=${name}_${i}_$arm
        collector $n $port
        (
            extra=()
            case $arm in
                none) extra=(--agent none) ;; off) export STEPWATCH_WINDOWS=0 ;;
                nophase) export STEPWATCH_PHASE_BUDGET=0 ;; nogpm) export STEPWATCH_NVML_GPM=0 ;;
                sched) export STEPWATCH_WINDOWS=scheduled ;;           # windows on the schedule
                warmonly) export STEPWATCH_WINDOWS=scheduled STEPWATCH_WINDOW_INTERVAL_S=86400 ;;  # the warm-up session, no window after
                cpuwin) export STEPWATCH_WINDOWS=scheduled STEPWATCH_WINDOW_ACTIVITIES=cpu ;;      # scheduled windows without CUDA activity
                cudawin) export STEPWATCH_WINDOWS=scheduled STEPWATCH_WINDOW_ACTIVITIES=cuda ;;    # scheduled windows, CUDA activity only
                td0) export STEPWATCH_WINDOWS=scheduled TEARDOWN_CUPTI=0 ;;   # Kineto keeps CUPTI set up after a session
                td1) export STEPWATCH_WINDOWS=scheduled TEARDOWN_CUPTI=1 ;;   # ... or tears it down (set explicitly)
                noexport) export STEPWATCH_WINDOWS=scheduled STEPWATCH_WINDOW_EXPORT=0 ;;  # scheduled windows, traces dropped unwritten
                sched45|noexp45)  # a window every 45 s, never backed off (threshold 100%):
                    # many windows with and without their export for the after-effect study
                    export STEPWATCH_WINDOWS=scheduled STEPWATCH_WINDOW_INTERVAL_S=45 STEPWATCH_AFTEREFFECT_THRESHOLD=1.0
                    [ $arm = noexp45 ] && export STEPWATCH_WINDOW_EXPORT=0 ;;
                bare) export STEPWATCH_WINDOWS=0 STEPWATCH_PHASE_BUDGET=0 STEPWATCH_NVML_GPM=0 \
                          STEPWATCH_NVML_INTERVAL_S=3600 STEPWATCH_HOST_INTERVAL_S=3600 ;;
            esac
            b=$(eval echo "\${BATCH_${size}:-${BATCH:-}}")  # BATCH_<size> (e.g. BATCH_s=8) over BATCH
            [ -n "$b" ] && extra+=(--batch $b)
            extra+=(${JOB_ARGS:-})  # JOB_ARGS: more real_job.py arguments for every arm (e.g. a schedule)
            case $gpus in
                *,*) job2 $n $port $gpus $size $secs "${extra[@]}" ;;
                *) job1 $n $port $gpus $size $secs "${extra[@]}" ;;
            esac
        )
        finish $n $port
    done ;;
latin)  # NAME SECS A B C D: four rounds of SECS on GPUs 0-3, 1-GPU size m jobs, arm (g + r) % 4
         # on GPU g in round r: every GPU runs every arm once and every round holds every arm
         # (bench/agent_ab_real.py fits round + GPU + arm); detached like rounds, then wait-pack
    name=$1 secs=$2; shift 2; arms=("$@"); all=(); letters=abcd
    for r in 0 1 2 3; do
        round=""; letter=${letters:r:1}
        for g in 0 1 2 3; do
            round+="${round:+|}ddp-arms ${name}_${letter}${g} $g $g m $secs ${arms[$(((g + r) % 4))]}"
        done
        all+=("$round")
    done
    exec bash bench/run_real_device.sh rounds "${all[@]}" ;;
after)  # FILE "V|V": once FILE exists, the verbs side by side, detached; then after.done
    setsid bash -c 'while [ ! -f "$1" ]; do sleep 2; done
        IFS="|"; for cmd in $2; do eval "bash bench/run_real_device.sh $cmd" & done; unset IFS; wait
        touch /tmp/real/after.done' _ "$1" "$2" > $W/after.run.log 2>&1 < /dev/null &
    sleep 2; echo queued after $1 ;;
phase-ab)  # PORT GPU SIZE SECS: no agent / phase times off / default / every step, windows off,
           # in the order A B C D D C B A (each arm its own collector)
    port=$1 gpu=$2 size=$3 secs=$4; i=0
    for arm in none off default every every default off none; do
        i=$((i + 1)); n=pab_${size}_g${gpu}_${i}_$arm
        collector $n $port
        (
            export STEPWATCH_WINDOWS=0; extra=()
            case $arm in
                none) extra=(--agent none) ;; off) export STEPWATCH_PHASE_BUDGET=0 ;;
                every) export STEPWATCH_PHASE_BUDGET=0.1 ;;
            esac
            job1 $n $port $gpu $size $secs "${extra[@]}"
        )
        finish $n $port
    done ;;
phase-ab4)  # SECS: phase-ab on four GPUs at once, sizes s, m, s, m
    for g in 0 1 2 3; do
        size=s; [ $((g % 2)) = 1 ] && size=m
        bash bench/run_real_device.sh phase-ab $((4 + g)) $g $size $1 &
    done
    wait ;;
inject1x4)  # SECS AT CAUSE CAUSE CAUSE CAUSE: four 1-GPU jobs at once, one cause each (size m)
    secs=$1 at=$2; shift 2; g=0; armed $at
    for c in "$@"; do
        bash bench/run_real_device.sh inject1 d1_$c $((4 + g)) $g m $secs $c $at &
        g=$((g + 1))
    done
    wait ;;
slots)  # each argument a ';'-separated sequence of verbs, run detached; wait-pack collects them
    k=0
    for seq in "$@"; do
        k=$((k + 1))
        # setsid: the sequence outlives the device call that starts it (a plain background job
        # is killed with the call)
        setsid bash -c 'IFS=";"; for cmd in $1; do eval "bash bench/run_real_device.sh $cmd"; done; touch "$2"' \
            _ "$seq" "$W/slot$k.done" > $W/slot$k.run.log 2>&1 < /dev/null &
    done
    sleep 5; echo started $k slots ;;
rounds)  # each argument a round of '|'-separated verbs run side by side; the rounds one after
         # the other, detached (setsid); wait-pack collects them
    setsid bash -c 'for round in "$@"; do
            IFS="|"; for cmd in $round; do eval "bash bench/run_real_device.sh $cmd" & done; unset IFS; wait
        done; touch /tmp/real/rounds.done' _ "$@" > $W/rounds.run.log 2>&1 < /dev/null &
    sleep 5; echo started $# rounds ;;
probe)  # NAME GPUS SIZE [ARGS...]: bench/collective_timing_probe.py as an NCCL job of one rank
        # per GPU in GPUS ("0" or "0,1"), rank r's result in $W/NAME.r.json (--flight: c10d's
        # flight recorder with timing on; both buffer variables set, the older and the newer)
    name=$1 gpus=$2 size=$3; shift 3
    case " $* " in *" --flight "*) export TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_FR_BUFFER_SIZE=2000 ;; esac
    CUDA_VISIBLE_DEVICES=$gpus python3 -m torch.distributed.run --nproc_per_node $(echo $gpus | tr ',' '\n' | wc -l) \
        --master_port 29590 bench/collective_timing_probe.py --size $size --out "$W/$name.{rank}.json" "$@" \
        > $W/$name.log 2>&1
    tail -2 $W/$name.log ;;
gputests)  # NAME GPUS PATHS...: pytest on those GPUs, its files under $W/NAME
    name=$1 gpus=$2; shift 2; mkdir -p $W/$name
    CUDA_VISIBLE_DEVICES=$gpus OUT=$W/$name python3 -m pytest -q -s -p no:cacheprovider -W ignore "$@" \
        > $W/$name/gpu_tests.txt 2>&1
    grep -E "passed|failed|^(FAILED|ERROR)" $W/$name/gpu_tests.txt | tail -15 ;;
resume)  # NAME SIZE BATCH SECS1 SECS2 CAUSE RATIO: a 1-GPU job of SECS1, the collector restarted
         # (the same state_dir), then the job resumed from its checkpoint for SECS2 with CAUSE on
         # from 20 s (before it settles): its runs and alerts at the end (issue 67's live check)
    name=$1 size=$2 batch=$3 s1=$4 s2=$5 cause=$6 ratio=$7
    export STATE=$W/state
    collector ${name}_1 0
    job1 ${name}_1 0 0 $size $s1 --batch $batch --job $name --save-ckpt $W/$name.ckpt
    finish ${name}_1 0
    collector ${name}_2 0
    job1 ${name}_2 0 0 $size $s2 --batch $batch --job $name --resume $W/$name.ckpt \
        --inject $cause --inject-after-s 20 --inject-ratio $ratio &
    jobpid=$!
    python3 - "$name" "$s2" <<'EOF'
import json, sys, time, urllib.request
name, secs = sys.argv[1], float(sys.argv[2])
end = time.time() + secs
while time.time() < end:  # until the resumed run has settled and been compared (or SECS2)
    time.sleep(5)
    try:
        runs = json.load(urllib.request.urlopen(f"http://127.0.0.1:7401/api/jobs/{name}/runs", timeout=5))["runs"]
    except OSError:
        continue
    if runs and runs[-1].get("live") and runs[-1].get("settled_step_s"):
        break
time.sleep(6)  # the alert book's next update
for path in (f"api/jobs/{name}/runs", "api/alerts"):
    body = urllib.request.urlopen(f"http://127.0.0.1:7401/{path}", timeout=10).read()
    open(f"/tmp/real/{name}.{path.split('/')[-1]}.json", "wb").write(body)
    print(path, body.decode()[:3000])
EOF
    python3 -m stepwatch.collector.tools history $name --http 127.0.0.1:7401 | tee $W/$name.history.txt
    kill $jobpid 2>/dev/null; wait $jobpid
    finish ${name}_2 0 ;;
cause-batch)  # CAUSE SIZE MIN BATCHES...: the first of BATCHES (largest first) at which CAUSE moves
    # the step by MIN (0.12: +12%) or more, printed last (the last one given when none does): a
    # 38-s job per batch without the agent, CAUSE on from 14 s for 20 s, its clock in
    # ${OUT}/cause_batch_B.json. (The AdamW for-loop moved a batch-8 step +5.5% on an H100,
    # +9.6% on an H200: its host time grows ~11 ms a step, hidden while the device is behind.)
    cause=$1 size=$2 min=$3; shift 3; pick=""
    for b in "$@"; do
        f=${OUT:-$W}/cause_batch_$b
        python3 bench/real_job.py --size $size --batch $b --duration-s 38 --agent none \
            --inject-schedule $cause --inject-after-s 14 --inject-on-s 20 --inject-off-s 100 \
            --steps-out $f.json > $f.log 2>&1
        if python3 - $f.json $min <<'EOF' >&2
import json, statistics, sys
d = json.load(open(sys.argv[1]))
t = d["schedule"][0]
s, e = t["step"], t["end_step"]
before = d["step_s"][max(1, s - 200):s - 1]
during = d["step_s"][s + 25:e - 1]
r = statistics.median(during) / statistics.median(before) - 1
print(f"batch {d['batch']}: {t['cause']} {statistics.median(before) * 1e3:.2f} -> "
      f"{statistics.median(during) * 1e3:.2f} ms ({r:+.1%}; {len(before)} / {len(during)} steps)")
sys.exit(0 if r >= float(sys.argv[2]) else 1)
EOF
        then pick=$b; break; fi
    done
    echo ${pick:-$b} ;;
pulses-start)  # NAME SIZE SECS AFTER CAUSES: a 1-GPU job at the defaults, CAUSES (comma-separated)
    # turned on in turn from AFTER s (each on ON_S=90 s, off OFF_S=140 s, RATIO=0.10 of the step),
    # detached; its collector records, its alerts and jobs are kept at the end (wait-pack NAME)
    # (setsid: the collector, the job and finish outlive the device call that starts them; a
    # plain background collector was killed with the call on 2026-12-03, 500 s into a job)
    armed $4
    setsid bash bench/run_real_device.sh pulses-run "$@" > $W/$1.run.log 2>&1 < /dev/null &
    sleep 8; echo started $1 ;;
pulses-run)  # NAME SIZE SECS AFTER CAUSES: pulses-start's detached part
    collector $1 0
    job1 $1 0 0 $2 $3 --inject-schedule $5 --inject-after-s $4 --inject-ratio ${RATIO:-0.10} \
        --inject-on-s ${ON_S:-90} --inject-off-s ${OFF_S:-140} ${BATCH:+--batch $BATCH}
    finish $1 0; touch $W/$1.done ;;
restarts-start)  # NAME SIZE SECS AFTER CAUSES RESTARTS: pulses-start with a state_dir, its collector
    # killed (SIGKILL; SIGNALS=TERM,KILL: the signal of each restart in turn) and started again on
    # it at each of RESTARTS (comma-separated seconds after the job's start), detached: the live
    # check of detection across collector restarts; each collector records to its own file (NAME,
    # NAME_r1, ...); the alerts at the end are the last's
    armed $4
    setsid bash bench/run_real_device.sh restarts-run "$@" > $W/$1.run.log 2>&1 < /dev/null &
    sleep 8; echo started $1 ;;
restarts-run)  # NAME SIZE SECS AFTER CAUSES RESTARTS: restarts-start's detached part
    export STATE=$W/$1.state
    collector $1 0
    job1 $1 0 0 $2 $3 --inject-schedule $5 --inject-after-s $4 --inject-ratio ${RATIO:-0.10} \
        --inject-on-s ${ON_S:-90} --inject-off-s ${OFF_S:-140} ${BATCH:+--batch $BATCH} &
    jobpid=$! t0=$(date +%s) last=$1 k=0 sigs=(${SIGNALS//,/ })
    for at in ${6//,/ }; do
        left=$(( at - ($(date +%s) - t0) )); [ $left -gt 0 ] && sleep $left
        kill -0 $jobpid 2>/dev/null || break
        snapshot $last 0 > /dev/null  # (what it raised: a restarted collector keeps no alert history)
        sig=${sigs[$k]:-KILL}
        kill -$sig $(cat $W/$last.collector.pid); wait $(cat $W/$last.collector.pid) 2>/dev/null
        echo "$(date +%s.%N) collector $last stopped (SIG$sig) at $at s" | tee -a $W/$1.restarts.log
        k=$((k + 1)) last=${1}_r$k
        collector $last 0
        echo "$(date +%s.%N) collector $last started" | tee -a $W/$1.restarts.log
    done
    wait $jobpid
    finish $last 0; gzip -9 -f $W/$1.jsonl $W/${1}_r*.jsonl 2>/dev/null; touch $W/$1.done ;;
poll)  # NAME SECONDS: the detached job's alerts every 60 s for SECONDS (into $W/NAME.poll.log)
    for _ in $(seq $(( $2 / 60 ))); do
        sleep 60
        python3 -c "import json,sys,urllib.request; a=json.load(urllib.request.urlopen('http://127.0.0.1:7401/api/alerts',timeout=5))['alerts']; print(len(a), [(x['alertname'], x['severity'], x['state'], x['fired_at'], x['diagnosis'][:80]) for x in a])" 2>&1 | tee -a $W/$1.poll.log
    done ;;
sleep-pack)  # PREFIX SECONDS: sleep, then pack what the detached jobs wrote so far: end every
            # call of a detached sequence with it (a machine given back between two calls keeps
            # nothing; 2026-12-02 lost eight finished jobs so)
    sleep $2
    tarball $1
    ls $W | grep -c steps.json ;;
pack-until)  # NAME PREFIX SECONDS: pack PREFIX's files every 50 s until NAME's job is done or SECONDS
            # have passed, then once more: a call cut short (its limit, the session's device time
            # running out) still brings back what the job wrote by its last minute (real_h100v.md)
    t0=$(date +%s)
    while [ ! -f $W/$1.done ] && [ $(( $(date +%s) - t0 + 50 )) -lt $3 ]; do
        sleep 50; tarball $2
    done
    tarball $2
    ls $W | grep -c "^$2" ;;
wait-pack)  # every detached job done (at most WAIT_S=540 s), then pack the files starting with $1
    for _ in $(seq ${WAIT_S:-540}); do
        n_runs=$(ls $W/*.run.log 2>/dev/null | wc -l); n_done=$(ls $W/*.done 2>/dev/null | wc -l)
        [ "$n_runs" -gt 0 ] && [ "$n_done" -ge "$n_runs" ] && break; sleep 1
    done
    grep -H "rank .*steps, batch" $W/${1:-}*.log
    tarball "${1:-}"
    ls -la $W ;;
pack)  # $W's files whose names start with $1 (default: all) into $OUT/real.tgz
    grep -H "rank .*steps, batch" $W/${1:-}*.log
    tarball "${1:-}"
    ls -la $W | head -70 ;;
esac
