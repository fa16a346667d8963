#!/bin/bash
# Under Open MPI's mpirun every process is one rank (OMPI_COMM_WORLD_*): with MASTER_ADDR /
# MASTER_PORT exported (mpirun -x) the ranks meet through them; without them a build with MPI
# bootstraps through MPI (ring/mpi_boot.h), one without names the missing variable.
# Both land on the local (threads) run's losses bit for bit. A world size other than --nranks is
# refused naming both. Skips (77) without mpirun. Extra arguments: TRACE_CHECK,
# mpi|no-mpi|mpi-sanitized (the last: a sanitizer build, where the MPI bootstrap is not run).
source "$(dirname "$0")/runtime_lib.sh"
HAVE_MPI=$6
command -v mpirun > /dev/null || { echo "mpirun not found (Debian: openmpi-bin): skipped"; exit 77; }
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
ARGS=(--config "$CFG" --data "$DATA" --threads 1 --quiet --timeout 60s --strategy weipipe-interleave --nranks 4 --steps 3)

train "${ARGS[@]:6}" --transport local --metrics "$TMP/local.jsonl" || fail "local run"
losses "$TMP/local.jsonl" > "$TMP/local.loss"
[ "$(wc -l < "$TMP/local.loss")" = 3 ] || fail "local run wrote $(wc -l < "$TMP/local.loss") losses, expected 3"

port=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768-60999): no outgoing connection holds it
MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WEIPIPE_SECRET=s3cret WEIPIPE_JOB_ID=mpirun-test \
  "${MPIRUN[@]}" -np 4 -x MASTER_ADDR -x MASTER_PORT -x WEIPIPE_SECRET -x WEIPIPE_JOB_ID \
  "$W" train "${ARGS[@]}" --transport tcp --metrics "$TMP/vars.jsonl" 2> "$TMP/err" || fail "mpirun with MASTER_*: $(tail -3 "$TMP/err")"
losses "$TMP/vars.jsonl" | cmp -s - "$TMP/local.loss" || fail "mpirun with MASTER_*: losses differ from the local run"
echo "mpirun -np 4 with MASTER_ADDR/PORT: the local run's 3 losses bit for bit"

env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 2)) \
  "${MPIRUN[@]}" -np 4 -x MASTER_ADDR -x MASTER_PORT "$W" train "${ARGS[@]}" --transport tcp 2> "$TMP/err" ||
  fail "mpirun with MASTER_* and no WEIPIPE_SECRET / WEIPIPE_JOB_ID: $(tail -3 "$TMP/err")"
[ "$(grep -c "not authenticated" "$TMP/err")" = 1 ] && grep -q "from PMIX_NAMESPACE\|from OMPI_MCA_ess_base_jobid" "$TMP/err" ||
  fail "mpirun without a secret: expected one warning naming Open MPI's job id: $(cat "$TMP/err")"
echo "mpirun -np 4 without WEIPIPE_SECRET / WEIPIPE_JOB_ID: runs on Open MPI's job id, one warning"

boot() { # mpirun -np 4 with none of the rendezvous variables
  env -u MASTER_ADDR -u MASTER_PORT -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID \
    "${MPIRUN[@]}" -np 4 "$W" train "${ARGS[@]}" --transport tcp --metrics "$TMP/boot.jsonl" 2> "$TMP/err"
}
case $HAVE_MPI in
mpi)
  boot || fail "mpirun without MASTER_* (MPI bootstrap): exit $?: $(tail -3 "$TMP/err")"
  losses "$TMP/boot.jsonl" | cmp -s - "$TMP/local.loss" || fail "MPI bootstrap: losses differ from the local run"
  echo "mpirun -np 4 without MASTER_*: bootstrapped through MPI, the same losses" ;;
no-mpi)
  boot && fail "mpirun without MASTER_* in a build without MPI succeeded"
  grep -q MASTER_ADDR "$TMP/err" || fail "mpirun without MASTER_* in a build without MPI: $(tail -2 "$TMP/err")"
  echo "mpirun -np 4 without MASTER_* (no MPI in this build): refused naming MASTER_ADDR" ;;
*) echo "MPI bootstrap not run under a sanitizer (Open MPI's own leaks and threads would be reported)" ;;
esac

MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 1)) WEIPIPE_SECRET=s3cret WEIPIPE_JOB_ID=mpirun-test \
  "${MPIRUN[@]}" -np 3 -x MASTER_ADDR -x MASTER_PORT -x WEIPIPE_SECRET -x WEIPIPE_JOB_ID \
  "$W" train "${ARGS[@]}" --transport tcp 2> "$TMP/err" && fail "mpirun -np 3 with --nranks 4 succeeded"
grep -q "nranks 4 but the launcher.* started 3" "$TMP/err" || fail "mpirun -np 3: message does not name both sizes: $(tail -2 "$TMP/err")"
echo "mpirun -np 3 with --nranks 4: refused naming both"
