#!/bin/bash
# weipipe train started the way users start it: each process one rank of a launcher's job
# (torchrun's, Slurm's, Open MPI's variables, set here by hand: no launcher is run).
#  - no WEIPIPE_SECRET: the job runs; rank 0 alone warns, once, that the ranks are not
#    authenticated and how to change that; with a secret there is no warning.
#  - two jobs with different ids at one MASTER_ADDR:MASTER_PORT: the second job's ranks fail
#    within seconds with one line naming the first job's id (not a hang), and the first job
#    still forms.
#  - --nranks omitted: the world size is the launcher's (torchrun, Slurm, Open MPI variables),
#    read before the schedule is built; a --nranks that disagrees exits 2 naming both, at once.
#  - in an sbatch batch script (Slurm's variables with SLURM_PROCID=0 but no SLURM_STEP_ID) a
#    plain `weipipe train` is a job of one rank, and `--nranks 2` launches its own 2 ranks.
#  - threads per rank, as rank 0's start-up line says: --threads, else OMP_NUM_THREADS, else
#    SLURM_CPUS_PER_TASK, else the cores / the ranks on this host.
#  - a --save directory is one job's at a time: while job A (2 ranks over tcp) trains into it,
#    job B (threads) and job B' (torchrun's variables) exit 2 naming A's host, pid and job id;
#    once A is SIGKILLed, job C takes the stale lock over with a warning naming A.
source "$(dirname "$0")/runtime_lib.sh"
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$TMP"' EXIT
ARGS=(--transport tcp --strategy weipipe-interleave --steps 2)
# below the ephemeral range (32768-60999), where outgoing connections of other tests take ports
port() { echo $((20000 + RANDOM % 12000)); }
# rank R of a torchrun-style job: rank R WORLD PORT RUN_ID ARGS... (WEIPIPE_SECRET=$SECRET if set)
rank() {
  local r=$1 n=$2 p=$3 id=$4; shift 4
  env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID ${SECRET:+WEIPIPE_SECRET=$SECRET} RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
    TORCHELASTIC_RUN_ID=$id "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s "${ARGS[@]}" "$@"
}
now() { date +%s.%N; }
took() { awk -v a=$1 -v b=$(now) 'BEGIN {printf "%.2f", b - a}'; }

# 1. authentication off by default
P=$(port)
rank 0 2 $P job-a --nranks 2 2> "$TMP/a0" & a0=$!
rank 1 2 $P job-a --nranks 2 2> "$TMP/a1" || fail "rank 1 without a secret: $(cat "$TMP/a1")"
wait $a0 || fail "rank 0 without a secret: $(cat "$TMP/a0")"
[ "$(grep -c 'not authenticated.*set WEIPIPE_SECRET to the same value on every rank' "$TMP/a0")" = 1 ] ||
  fail "rank 0 did not warn once: $(cat "$TMP/a0")"
grep -q 'authenticated' "$TMP/a1" && fail "rank 1 warned too: $(cat "$TMP/a1")"
P=$(port)
SECRET=s3 rank 0 2 $P job-s --nranks 2 2> "$TMP/s0" & s0=$!
SECRET=s3 rank 1 2 $P job-s --nranks 2 2> "$TMP/s1" || fail "rank 1 with a secret: $(cat "$TMP/s1")"
wait $s0 || fail "rank 0 with a secret: $(cat "$TMP/s0")"
grep -q 'authenticated' "$TMP/s0" && fail "warned although WEIPIPE_SECRET is set: $(cat "$TMP/s0")"
echo "no WEIPIPE_SECRET: the job runs, rank 0 warns once; with one: no warning"

# 2. two jobs at one port: the second fails fast naming the first
P=$(port)
rank 0 2 $P job-a --nranks 2 --connect-timeout 30s 2> "$TMP/a0" & a0=$!
for _ in $(seq 100); do ss -ltn 2> /dev/null | grep -q ":$P " && break; sleep 0.1; done
for r in 1 0; do
  t0=$(now)
  rank $r 2 $P job-b --nranks 2 2> "$TMP/b$r"; rc=$?
  t=$(took $t0)
  [ $rc = 1 ] || fail "job-b rank $r exited $rc, expected 1: $(cat "$TMP/b$r")"
  awk -v t=$t 'BEGIN {exit !(t < 10)}' || fail "job-b rank $r took ${t}s to fail"
  [ "$(grep -c 'error:' "$TMP/b$r")" = 1 ] && grep -q "error: .*another job (this job is 'job-b'" "$TMP/b$r" ||
    fail "job-b rank $r does not say so in one line: $(cat "$TMP/b$r")"
  ! grep -q "job-a" "$TMP/b$r" || fail "job-b rank $r was told job-a's id: $(cat "$TMP/b$r")"
  echo "job-b rank $r: exit 1 after ${t}s: $(grep error: "$TMP/b$r")"
done
rank 1 2 $P job-a --nranks 2 2> "$TMP/a1" || fail "job-a rank 1 after job-b's attempts: $(cat "$TMP/a1")"
wait $a0 || fail "job-a rank 0 after job-b's attempts: $(cat "$TMP/a0")"
echo "two jobs at one port: job-b failed fast naming job-a; job-a ran"

# 3. --nranks omitted under a launcher: the launcher's world size
P=$(port)
rank 0 2 $P job-w 2> "$TMP/w0" & w0=$!
rank 1 2 $P job-w 2> "$TMP/w1" || fail "torchrun variables, no --nranks: rank 1: $(cat "$TMP/w1")"
wait $w0 || fail "torchrun variables, no --nranks: rank 0: $(cat "$TMP/w0")"
P=$(port)
slurm() { # slurm PROCID NTASKS ARGS...: a task of an srun job step
  local r=$1 n=$2; shift 2
  env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID SLURM_JOB_ID=4242 SLURM_STEP_ID=0 SLURM_STEPID=0 SLURM_PROCID=$r \
    SLURM_LOCALID=$r SLURM_NTASKS=$n SLURM_JOB_NODELIST=localhost MASTER_ADDR=127.0.0.1 MASTER_PORT=$P \
    "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s "${ARGS[@]}" "$@"
}
slurm 0 2 2> "$TMP/sl0" & s0=$!
slurm 1 2 2> "$TMP/sl1" || fail "Slurm variables, no --nranks: rank 1: $(cat "$TMP/sl1")"
wait $s0 || fail "Slurm variables, no --nranks: rank 0: $(cat "$TMP/sl0")"
grep -q "job '4242.0' (from SLURM_JOB_ID.SLURM_STEP_ID)" "$TMP/sl0" || fail "Slurm job id not 4242.0: $(cat "$TMP/sl0")"
P=$(port)
ompi() { # ompi RANK SIZE ARGS...: a rank of mpirun -x MASTER_ADDR -x MASTER_PORT
  local r=$1 n=$2; shift 2
  env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$n OMPI_COMM_WORLD_LOCAL_RANK=$r \
    OMPI_COMM_WORLD_LOCAL_SIZE=$n PMIX_NAMESPACE=777 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P \
    "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s "${ARGS[@]}" "$@"
}
ompi 0 2 2> "$TMP/o0" & o0=$!
ompi 1 2 2> "$TMP/o1" || fail "Open MPI variables, no --nranks: rank 1: $(cat "$TMP/o1")"
wait $o0 || fail "Open MPI variables, no --nranks: rank 0: $(cat "$TMP/o0")"
echo "--nranks omitted: 2 ranks from WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE"
expect_both() { # expect_both LAUNCHER COMMAND...: exit 2 at once naming --nranks 3 and the launcher's 2
  local l=$1; shift
  t0=$(now)
  "$@" --nranks 3 2> "$TMP/n"; rc=$?
  t=$(took $t0)
  [ $rc = 2 ] && grep -q "error: --nranks 3 but the launcher ($l) started 2 ranks" "$TMP/n" ||
    fail "$l, --nranks 3 of 2: exit $rc: $(cat "$TMP/n")"
  awk -v t=$t 'BEGIN {exit !(t < 10)}' || fail "$l: --nranks 3 of 2 took ${t}s to be refused"
}
expect_both torchrun rank 0 2 $(port) job-n
expect_both slurm slurm 0 2
expect_both openmpi ompi 1 2
echo "--nranks 3 under a launcher of 2 ranks: exit 2 naming both (torchrun, Slurm, Open MPI), before any rendezvous"

# 4. an sbatch batch script: SLURM_PROCID=0 and SLURM_NTASKS=4 but no step id (no srun)
batch() {
  env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID -u SLURM_STEP_ID -u SLURM_STEPID -u MASTER_ADDR -u MASTER_PORT \
    SLURM_JOB_ID=4243 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NTASKS=4 SLURM_JOB_NODELIST=localhost \
    "$W" train --config "$CFG" --data "$DATA" --threads 1 --timeout 60s --connect-timeout 5s "${ARGS[@]}" "$@"
}
t0=$(now)
batch --metrics "$TMP/b.jsonl" 2> "$TMP/batch" || fail "plain weipipe train in a batch script: $(cat "$TMP/batch")"
grep -q "rank 0:" "$TMP/batch" && ! grep -q "rank 1:" "$TMP/batch" || fail "batch script: not a job of one rank: $(cat "$TMP/batch")"
[ "$(losses "$TMP/b.jsonl" | wc -l)" = 2 ] || fail "batch script: $(losses "$TMP/b.jsonl" | wc -l) losses, expected 2"
batch --nranks 2 --quiet 2> "$TMP/batch2" || fail "weipipe train --nranks 2 in a batch script: $(cat "$TMP/batch2")"
echo "sbatch batch script (SLURM_PROCID=0, SLURM_NTASKS=4, no SLURM_STEP_ID): one rank in $(took $t0)s, and --nranks 2 launches 2"

# 5. threads per rank
# Under ThreadSanitizer (scripts/test-sanitize.sh sets TSAN_OPTIONS) these runs would start
# OpenMP teams, which TSan cannot follow (libgomp is not instrumented: false races, and spinning
# teams on 2 cores take minutes); the plain and AddressSanitizer runs check this section.
if [ -n "${TSAN_OPTIONS:-}" ]; then
  echo "threads per rank: not checked under ThreadSanitizer (OpenMP teams); the plain and ASan runs check it"
else
cores=$(getconf _NPROCESSORS_ONLN)
th() { # th WANT ENV... -- ARGS...: rank 0's line about threads names WANT
  local want=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env -u OMP_NUM_THREADS -u SLURM_CPUS_PER_TASK -u WEIPIPE_SECRET "${envs[@]}" "$W" train --config "$CFG" --data "$DATA" \
    --timeout 60s --steps 1 "$@" > /dev/null 2> "$TMP/th" || fail "threads ($want): $(cat "$TMP/th")"
  grep -qF "$want" "$TMP/th" || fail "threads: expected '$want': $(grep -i thread "$TMP/th")"
  [ "$(grep -c 'CPU thread' "$TMP/th")" = 1 ] || fail "threads: not one line: $(grep -i thread "$TMP/th")"
}
t1=$((cores > 2 ? cores / 2 : 1)); s1=$([ $t1 = 1 ] && echo "" || echo s)
th "rank 0: $cores CPU thread$([ $cores = 1 ] || echo s) per rank ($cores cores / 1 rank on this host)" --
th "rank 0: 3 CPU threads per rank (OMP_NUM_THREADS)" OMP_NUM_THREADS=3 SLURM_CPUS_PER_TASK=5 --
th "rank 0: 5 CPU threads per rank (SLURM_CPUS_PER_TASK)" SLURM_CPUS_PER_TASK=5 --
th "rank 0: 2 CPU threads per rank (--threads)" OMP_NUM_THREADS=3 -- --threads 2
th "rank 0: $t1 CPU thread$s1 per rank ($cores cores / 2 ranks on this host)" -- --transport local --nranks 2
P=$(port)
step2() { # a task of an srun step of 2 tasks on one node, no --threads
  local r=$1; shift
  env -u OMP_NUM_THREADS -u SLURM_CPUS_PER_TASK -u WEIPIPE_SECRET SLURM_JOB_ID=4244 SLURM_STEP_ID=1 SLURM_PROCID=$r \
    SLURM_LOCALID=$r SLURM_NODEID=0 SLURM_NTASKS=2 SLURM_STEP_TASKS_PER_NODE=2 SLURM_JOB_NODELIST=localhost \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$P "$W" train --config "$CFG" --data "$DATA" --timeout 60s "${ARGS[@]}" "$@"
}
step2 0 > /dev/null 2> "$TMP/st0" & st0=$!
step2 1 > /dev/null 2> "$TMP/st1" || fail "srun step without --threads: rank 1: $(cat "$TMP/st1")"
wait $st0 || fail "srun step without --threads: rank 0: $(cat "$TMP/st0")"
grep -qF "rank 0: $t1 CPU thread$s1 per rank ($cores cores / 2 ranks on this host)" "$TMP/st0" ||
  fail "srun step: $(grep -i thread "$TMP/st0")"
echo "threads per rank: --threads > OMP_NUM_THREADS > SLURM_CPUS_PER_TASK > $cores cores / ranks on this host (local threads, an srun step of 2)"
fi

# 6. one job per --save directory
D="$TMP/save"
"$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s --strategy weipipe-interleave \
  --transport tcp --nranks 2 --steps 1000000 --save "$D" 2> "$TMP/A" & A=$!
for _ in $(seq 200); do grep -q "pid=$A " "$D/.weipipe.lock" 2> /dev/null && break; sleep 0.05; done
grep -q "host=$(hostname) pid=$A job=" "$D/.weipipe.lock" || fail "job A's lock record: $(cat "$D/.weipipe.lock")"
holder="host $(hostname), pid $A, job 'weipipe train, pid $A, no launcher'"
t0=$(now)
train --nranks 2 --transport local --strategy weipipe-interleave --steps 2 --save "$D" 2> "$TMP/B"; rc=$?
[ $rc = 2 ] && grep -qF "error: --save $D is in use by another job: $holder" "$TMP/B" ||
  fail "job B (threads) on A's --save: exit $rc: $(cat "$TMP/B")"
echo "job B (threads): exit 2 in $(took $t0)s: $(cat "$TMP/B")"
P=$(port)
rank 0 2 $P job-bb --save "$D" 2> "$TMP/B0" & b0=$!
rank 1 2 $P job-bb --save "$D" 2> "$TMP/B1"; rc1=$?
wait $b0; rc0=$?
[ $rc0 = 2 ] && grep -qF "error: --save $D is in use by another job: $holder" "$TMP/B0" ||
  fail "job B' rank 0 on A's --save: exit $rc0: $(cat "$TMP/B0")"
[ $rc1 != 0 ] && grep -qF "is in use by another job: $holder" "$TMP/B1" ||
  fail "job B' rank 1 on A's --save: exit $rc1: $(cat "$TMP/B1")"
echo "job B' (torchrun's variables): rank 0 exit 2 naming the holder, rank 1 exit $rc1 with its reason"
kill -9 $A; wait $A 2> /dev/null
for _ in $(seq 100); do pgrep -g $A > /dev/null 2>&1 || break; sleep 0.05; done
train --nranks 2 --transport local --strategy weipipe-interleave --steps 2 --save "$D" 2> "$TMP/C" ||
  fail "job C after A was killed: $(cat "$TMP/C")"
grep -qF "warning: --save $D: taking over the lock left by $holder" "$TMP/C" || fail "job C did not warn: $(cat "$TMP/C")"
[ ! -s "$D/.weipipe.lock" ] || fail "job C left its lock record: $(cat "$D/.weipipe.lock")"
echo "job A SIGKILLed: job C took its stale lock over with a warning, and released it"
