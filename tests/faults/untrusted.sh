#!/bin/bash
# Issue 31: nothing lost, nothing hung, no stranger. Each case failed before its fix:
#   - a FIFO, a device or a directory where a file is read: exit 2 at once naming it (was: blocked
#     forever, read /dev/zero forever, or trained the default model from a directory --config);
#   - numeric flags beyond their range: exit 2 naming the flag (was: a libgomp segfault, ranks
#     spinning deaf to SIGTERM, a step that never ended);
#   - --resume auto without a usable latest resumes from the newest verified checkpoint or
#     refuses (was: started over and pruned the finished ones); a fresh run never prunes another's;
#   - a manifest edited anywhere (its own checksum), a loss_scale outside the scaler's range, a
#     shard with overlapping tensors or a shape whose product wraps: exit 2 naming it;
#   - a failed --metrics write: exit 1 naming the file (was: exit 0, a cut line); --trace the same.
source "$(dirname "$0")/faults_lib.sh"
TR=("$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --transport tcp)
T=10 # no case may take longer: a hang fails the test instead of blocking it

# refused WHAT PATTERN CMD...: CMD exits 2 within T seconds, its stderr one error line matching PATTERN.
refused() {
  local what=$1 pat=$2 rc
  shift 2
  timeout $T "$@" > "$TMP/out" 2> "$TMP/err" < /dev/null
  rc=$?
  [ $rc = 2 ] || { cat "$TMP/err"; fail "$what: exit $rc, expected 2 (124 = hung)"; }
  [ "$(grep -c 'weipipe: error:' "$TMP/err")" = 1 ] && grep -q -- "$pat" "$TMP/err" || { cat "$TMP/err"; fail "$what: no one line matching '$pat'"; }
  echo "$what: $(grep -m1 -o 'error: .*' "$TMP/err" | cut -c1-140)"
}

# --- item 7: only regular files where files are read
mkfifo "$TMP/fifo"
refused "a FIFO as --data" "$TMP/fifo" "$W" train --config "$CFG" --data "$TMP/fifo" --steps 1
refused "a FIFO as --config" "$TMP/fifo" "$W" train --config "$TMP/fifo" --data "$DATA" --steps 1
refused "/dev/zero as --config" "/dev/zero" "$W" train --config /dev/zero --data "$DATA" --steps 1
refused "a directory as --config" "$TMP: not a regular file" "$W" train --config "$TMP" --data "$DATA" --steps 1
mkdir "$TMP/hf" && mkfifo "$TMP/hf/config.json"
refused "a FIFO as config.json of --init-from" "config.json" "$W" train --config "$CFG" --data "$DATA" --init-from "$TMP/hf" --steps 1
rm "$TMP/hf/config.json" && mkfifo "$TMP/hf/model.safetensors"
echo '{"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu"}' > "$TMP/hf/config.json"
refused "a FIFO as model.safetensors" "model.safetensors" "$W" train --config "$CFG" --data "$DATA" --init-from "$TMP/hf" --steps 1 \
  --num-layers 4 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2 --ffn-hidden-size 160 --vocab-size 256

# --- item 8: numeric flags within range
refused "--threads 100000" "threads" "${TR[@]}" --steps 1 --threads 100000
refused "--timeout 1e30s" "timeout" "${TR[@]}" --steps 1 --timeout 1e30s
refused "--device-tflops 1e-30" "device-tflops" "${TR[@]}" --steps 1 --device-tflops 1e-30
refused "--link-bandwidth 1e-30GByte" "link-bandwidth" "$W" simulate --config "$CFG" --link-bandwidth 1e-30GByte
# with the longest --timeout allowed, a SIGTERM to one rank still ends the whole job at the next
# step boundary (was, with --timeout 1e30s: every rank spinning, deaf to SIGTERM)
start_job "$TMP/term.log" --nranks 3 --steps 1000000 --timeout 86400s
wait_ranks 3
sleep 1
kill -TERM "$(pid_of_rank 2)"
t0=$(now)
for _ in $(seq $((T * 10))); do kill -0 "$LAUNCHER" 2> /dev/null || break; sleep 0.1; done
kill -0 "$LAUNCHER" 2> /dev/null && { kill -KILL -- -"$PGID" "$LAUNCHER"; fail "--timeout 86400s: SIGTERM to one rank did not end the job in $T s"; }
wait "$LAUNCHER"
rc=$?
[ $rc = 0 ] && grep -q "stop requested" "$TMP/term.log" || { cat "$TMP/term.log"; fail "--timeout 86400s, SIGTERM: exit $rc"; }
echo "--timeout 86400s, SIGTERM to rank 2: the job stopped in $(elapsed "$t0") s, exit 0"

# --- item 2: --resume auto without a usable latest
S=$TMP/ck
train --steps 4 --save "$S" --save-every 1 --keep-last 3 || fail "the first run"
rm "$S/latest"
train --steps 6 --save "$S" --save-every 1 --keep-last 3 --resume auto --metrics "$TMP/m1.jsonl" 2> "$TMP/r1.err" || { cat "$TMP/r1.err"; fail "resume without latest"; }
first=$(losses_from "$TMP/m1.jsonl" 0 | head -1 | cut -d' ' -f1)
[ "$first" = 5 ] || fail "latest missing: first step $first, expected 5 (from step-4)"
grep -q "step-4, the newest checkpoint" "$TMP/r1.err" || { cat "$TMP/r1.err"; fail "latest missing: no warning naming step-4"; }
echo "latest missing: resumed from step-4 with a warning: $(grep -m1 -o 'warning: .*' "$TMP/r1.err" | cut -c1-120)"
rm "$S/latest" && ln -s latest "$S/latest" # a link to itself
train --steps 7 --save "$S" --save-every 1 --keep-last 3 --resume auto --metrics "$TMP/m2.jsonl" 2> /dev/null || fail "resume with a looping latest"
first=$(losses_from "$TMP/m2.jsonl" 0 | head -1 | cut -d' ' -f1)
[ "$first" = 7 ] || fail "looping latest: first step $first, expected 7 (from step-6)"
echo "latest a looping link: resumed from step-6"
# nothing verifies: refused, nothing deleted
rm -f "$S/latest"
for m in "$S"/step-*/manifest.json; do echo " " >> "$m"; done
before=$(ls "$S" | tr '\n' ' ')
refused "no latest, no verified manifest" "$S: no readable latest" "${TR[@]}" --steps 9 --save "$S" --resume auto
[ "$(ls "$S" | tr '\n' ' ')" = "$before" ] || fail "refused resume changed $S: [$before] -> [$(ls "$S" | tr '\n' ' ')]"
# a fresh run beside another run's checkpoints: refused before it writes (issue 28: --resume
# continues it, --overwrite-save moves it aside), so it can neither prune nor mix them
S2=$TMP/ck2
train --steps 4 --save "$S2" --save-every 4 --keep-last 1 || fail "the old run"
before=$(ls "$S2" | tr '\n' ' ')
refused "a fresh run into another run's --save" "overwrite-save" "${TR[@]}" --steps 3 --save "$S2" --save-every 1 --keep-last 1
[ "$(ls "$S2" | tr '\n' ' ')" = "$before" ] || fail "refused fresh run changed $S2: [$before] -> [$(ls "$S2" | tr '\n' ' ')]"
# a run resumed from an older step of the chain prunes its own history, never a step it will not rewrite
train --steps 2 --save "$TMP/ck2b" --save-every 1 --keep-last 5 || fail "the chain"
train --steps 4 --save "$TMP/ck2b" --save-every 1 --keep-last 1 --resume "$TMP/ck2b/step-1" || fail "the run resumed from step-1"
[ "$(cat "$TMP/ck2b/latest")" = step-4 ] && [ ! -d "$TMP/ck2b/step-1" ] && [ ! -d "$TMP/ck2b/step-3" ] ||
  fail "resumed from step-1, --keep-last 1: $(ls "$TMP/ck2b" | tr '\n' ' '), expected only step-4"
echo "a run resumed from step-1 with --keep-last 1: left $(ls "$TMP/ck2b" | grep step | tr '\n' ' ')"

# --- item 9: the manifest's own checksum, optimizer state and safetensors checks
S3=$TMP/ck3
train --steps 2 --save "$S3" || fail "run for item 9"
cp -r "$S3/step-2" "$TMP/orig"
sed -i 's/"loss_scale": [0-9.e+]*/"loss_scale": 1e-300/' "$S3/step-2/manifest.json"
refused "a manifest edited (loss_scale 1e-300)" "checksum" "${TR[@]}" --steps 4 --resume "$S3/step-2"
# re-signed after editing: the checksum holds, the range check catches it
resign() { /usr/bin/python3 - "$1" <<'PY'
import json, sys, zlib
p = sys.argv[1]; m = json.load(open(p)); m.pop("checksum", None)
edit = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
body = json.dumps(m, indent=2)[:-2]
open(p, "w").write(body + ',\n  "checksum": "%08x"\n}\n' % zlib.crc32(body.encode()))
PY
}
resign "$S3/step-2/manifest.json"
refused "a re-signed manifest with loss_scale 1e-300" "loss_scale" "${TR[@]}" --steps 4 --resume "$S3/step-2"
# safetensors: a shard rebuilt with overlapping tensors, then with a wrapping shape
shard() { rm -rf "$S3/step-2" && cp -r "$TMP/orig" "$S3/step-2" && /usr/bin/python3 - "$S3/step-2" "$1" <<'PY'
import json, os, struct, sys, zlib
d, how = sys.argv[1], sys.argv[2]
p = os.path.join(d, "rank-00000.safetensors"); raw = open(p, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]; h = json.loads(raw[8:8 + n]); data = raw[8 + n:]
names = sorted(k for k in h if k != "__metadata__" and k.endswith(".exp_avg"))
t = names[0]
if how == "overlap": h[t]["data_offsets"] = h[t[:-len(".exp_avg")]]["data_offsets"]
else: h[t]["shape"] = [2**32, 2**32, 4]; h[t]["data_offsets"] = [0, 0]
hb = json.dumps(h).encode(); hb += b" " * (-len(hb) % 8)
out = struct.pack("<Q", len(hb)) + hb + data; open(p, "wb").write(out)
mp = os.path.join(d, "manifest.json"); m = json.load(open(mp)); m.pop("checksum")
for f in m["files"]:
    if f["name"] == "rank-00000.safetensors": f["size"] = len(out); f["crc32"] = "%08x" % zlib.crc32(out)
body = json.dumps(m, indent=2)[:-2]
open(mp, "w").write(body + ',\n  "checksum": "%08x"\n}\n' % zlib.crc32(body.encode()))
PY
}
shard overlap || fail "building the overlapping shard"
refused "a shard whose tensors overlap" "overlap" "${TR[@]}" --steps 4 --resume "$S3/step-2"
shard wrap || fail "building the wrapping shape"
refused "a shard with shape [2^32, 2^32, 4]" "shape too large" "${TR[@]}" --steps 4 --resume "$S3/step-2"
# a version-1 manifest (written before the checksum) still loads
rm -rf "$S3/step-2" && cp -r "$TMP/orig" "$S3/step-2"
/usr/bin/python3 -c 'import json, sys; p = sys.argv[1]; m = json.load(open(p)); m.pop("checksum"); m["version"] = 1; json.dump(m, open(p, "w"), indent=2)' \
  "$S3/step-2/manifest.json" || fail "writing a version-1 manifest"
"${TR[@]}" --steps 3 --resume "$S3/step-2" 2> "$TMP/v1.err" || { cat "$TMP/v1.err"; fail "a version-1 manifest without checksum no longer loads"; }
echo "a version-1 manifest without checksum: still resumed from"

# --- item 6: a failed --metrics write is an error
timeout $T "$W" train --config "$CFG" --data "$DATA" --threads 1 --quiet --steps 2 --metrics /dev/full > /dev/null 2> "$TMP/full.err"
rc=$?
[ $rc = 1 ] && grep -q "metrics /dev/full: write failed: No space left" "$TMP/full.err" || { cat "$TMP/full.err"; fail "--metrics /dev/full: exit $rc"; }
echo "--metrics /dev/full (exit $rc): $(grep -m1 -o 'error: .*' "$TMP/full.err")"
timeout $T "${TR[@]}" --steps 2 --trace /dev/full > /dev/null 2> "$TMP/trace.err"
rc=$?
[ $rc = 1 ] && grep -q "trace: writing '/dev/full' failed: No space left" "$TMP/trace.err" || { cat "$TMP/trace.err"; fail "--trace /dev/full: exit $rc"; }
echo "--trace /dev/full (exit $rc): $(grep -m1 -o 'error: .*' "$TMP/trace.err")"
