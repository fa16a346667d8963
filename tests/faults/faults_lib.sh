# Shared by the fault tests: arguments WEIPIPE CKPT_DIFF CONFIG DATA; a scratch directory
# removed on exit. Runs happen over tcp (one process per rank, weipipe's own launcher) on the
# tiny config, one thread per rank.
set -u
W=$(realpath "$1") DIFF=$(realpath "$2") CFG=$(realpath "$3") DATA=$(realpath "$4")
TMP=$(mktemp -d) || exit 1
cleanup_extra=""
trap 'eval "$cleanup_extra"; rm -rf "$TMP"' EXIT
train() { "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --transport tcp "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'; }
# The losses of a metrics file from step $2 on, one per line, as written (%.17g).
losses_from() { sed -n 's/^{"step": \([0-9]*\),.* "loss": \([^,]*\),.*/\1 \2/p' "$1" | awk -v k="$2" '$1 >= k'; }

# start_job LOG ARGS...: launches `train ARGS` in the background; sets LAUNCHER.
start_job() {
  local log=$1
  shift
  "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --transport tcp "$@" > "$log" 2>&1 &
  LAUNCHER=$!
}

# wait_ranks N: waits until the launcher has N children; sets KIDS (pids) and PGID (theirs).
wait_ranks() {
  for _ in $(seq 200); do
    KIDS=$(pgrep -P "$LAUNCHER" | tr '\n' ' ')
    [ "$(echo $KIDS | wc -w)" = "$1" ] && break
    sleep 0.05
  done
  [ "$(echo $KIDS | wc -w)" = "$1" ] || { kill "$LAUNCHER"; fail "the launcher started [$KIDS], not $1 ranks"; }
  PGID=$(ps -o pgid= -p "${KIDS%% *}" | tr -d ' ')
}

# pid_of_rank R: the pid (among KIDS) whose environment says RANK=R.
pid_of_rank() {
  local p
  for p in $KIDS; do
    [ "$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^RANK=//p')" = "$1" ] && { echo $p; return 0; }
  done
  return 1
}

# no_leftovers: no process of the ranks' group and none of their pids is alive.
no_leftovers() {
  local p
  [ -z "$(pgrep -g "$PGID")" ] || fail "processes left in group $PGID: $(pgrep -g "$PGID" | tr '\n' ' ')"
  for p in $KIDS; do
    kill -0 "$p" 2>/dev/null && fail "rank process $p still alive"
  done
  return 0
}

# verify_latest SAVE: SAVE/latest names a finished step directory whose manifest, sizes and
# CRC-32s check out and whose every tensor reads (ckpt_diff of it with itself); prints its name.
verify_latest() {
  local step
  step=$(cat "$1/latest" 2>/dev/null) || { echo "none"; return 0; }
  [ -d "$1/$step" ] || fail "$1/latest names $step, which is not there"
  "$DIFF" "$1/$step" "$1/$step" 0 > /dev/null || fail "$1/$step does not verify"
  echo "$step"
}
