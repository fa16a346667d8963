#!/bin/bash
# Follows docs/architecture.md's recipe "A new kernel op" once, on a temporary copy of kernels/,
# with the very compile and link lines ninja uses (compile_commands.json, ninja -t commands):
#   1. a row  OP(void, axpby, ...)  in the copy of kernels/ops_table.h;
#   2. cpu_axpby appended to the copy of kernels/cpu/elementwise.c;
#   3. cu_axpby in kernels/cuda/axpby.cu (when the build has CUDA: cuda_ops.c names it);
#   4. no rows in tests/kernels/test_ops.c: its coverage check must say so.
# and checks the doc's claims about it:
#   (a) with the row and both definitions, dispatch.c, replay.c, cpu_ops.c, elementwise.c, cuda_ops.c
#       compile, and a caller of the expanded kern_axpby links against them and runs it;
#   (b) a cpu_axpby whose signature disagrees with the row does not compile;
#   (c) without cpu_axpby the link fails: undefined reference to cpu_axpby;
#   (d) kern_create's completeness check (wp_kern_ops_check) refuses a table without the slot;
#   (e) test_ops.c's coverage check fails for the new slot (and passes with the real table).
# Arguments: BUILD_DIR (with compile_commands.json and the built libraries).
set -u
B=$(cd "$1" && pwd) || exit 1
CC_JSON=$B/compile_commands.json
[ -f "$CC_JSON" ] || { echo "no $CC_JSON"; exit 1; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The copy: every quoted include of a copied file finds the copy first (its own folder, then the
# -I folders put first below), so the whole expansion sees the new row.
K=$TMP/kernels
cp -r "$ROOT/kernels" "$K" || exit 1
python3 - "$K/ops_table.h" <<'PY' || exit 1
import sys
p = sys.argv[1]; s = open(p).read()
anchor = "n > 0 && PTRS(y, a, b))"
i = s.index(anchor); i = s.index("\n", i) + 1
row = ("    /* y = a * x + b * y on ct buffers (the recipe's test op) */ \\\n"
       "    OP(void, axpby, (wp_kern *k, void *y, float a, const void *x, float b, size_t n), (k, y, a, x, b, n), \\\n"
       "       n > 0 && PTRS(y, x)) \\\n")
open(p, "w").write(s[:i] + row + s[i:])
PY
cp "$K/cpu/elementwise.c" "$TMP/elementwise.orig.c"

# The compile command for $1, a source or a folder of the tree (cc_command.py): line 1 the folder
# it runs in, line 2 the flags.
command_for() { python3 "$(dirname "$0")/cc_command.py" "$CC_JSON" "$ROOT" "$1"; }
# compile SRC_IN_TREE FILE_TO_COMPILE OBJECT [extra flags]: the tree's command for SRC, on FILE,
# with the copy's folders first on the include path.
compile() {
    local info dir cmd
    info=$(command_for "$1")
    dir=$(printf '%s\n' "$info" | sed -n 1p)
    cmd=$(printf '%s\n' "$info" | sed -n 2p)
    [ -n "$cmd" ] || { echo "no compile command for $1" >"$TMP/out.txt"; return 1; }
    # the copy's folders go right after the compiler: -I folders are searched in order
    (cd "$dir" && eval "${cmd%% *} -I$K -I$K/cpu -I$K/cuda ${cmd#* } -fdiagnostics-color=never ${4:-} -c $2 -o $3") >"$TMP/out.txt" 2>&1
}

have_cuda=no
command_for kernels/cuda/cuda_ops.c | grep -q . && have_cuda=yes

cat >>"$K/cpu/elementwise.c" <<'C'

void cpu_axpby(wp_kern *k, void *y, float a, const void *x, float b, size_t n) {
    (void)k; /* the test context's compute dtype is F32 */
    float *yf = y;
    const float *xf = x;
    for (size_t i = 0; i < n; i++) yf[i] = a * xf[i] + b * yf[i];
}
C
# (a) the four kernels files compile with the row and both definitions
objs=""
for f in dispatch.c replay.c cpu/cpu_ops.c cpu/elementwise.c; do
    o=$TMP/$(basename "$f").o
    if compile "kernels/$f" "$K/$f" "$o"; then objs="$objs $o"; else fail "(a) $f with the new row:"; cat "$TMP/out.txt"; fi
done
if [ $have_cuda = yes ]; then
    if compile kernels/cuda/cuda_ops.c "$K/cuda/cuda_ops.c" "$TMP/cuda_ops.o"; then
        objs="$objs $TMP/cuda_ops.o"
    else
        fail "(a) cuda/cuda_ops.c with the new row:"; cat "$TMP/out.txt"
    fi
    cat >"$K/cuda/axpby.cu" <<'CU'
#include "dtype.cuh"
__global__ void axpby_kernel(float *y, float a, const float *x, float b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = a * x[i] + b * y[i];
}
void cu_axpby(wp_kern *k, void *y, float a, const void *x, float b, size_t n) {
    wp_cuda *c = cu_ctx(k);
    if (!c || n == 0) return;
    axpby_kernel<<<cu_grid_for(c, n, 256), 256, 0, c->stream>>>((float *)y, a, (const float *)x, b, n);
    CU_LAUNCH_CHECK(k, "axpby_kernel");
}
CU
    # elementwise.cu's command for the new family file; one target architecture, for time
    info=$(command_for kernels/cuda/elementwise.cu)
    dir=$(printf '%s\n' "$info" | sed -n 1p)
    cmd=$(printf '%s\n' "$info" | sed -n 2p | sed -E 's/ -gencode=arch=compute_[0-9]+,code=(sm|compute)_[0-9]+//2g')
    if (cd "$dir" && eval "${cmd%% *} -I$K -I$K/cuda ${cmd#* } -c $K/cuda/axpby.cu -o $TMP/axpby.cu.o") >"$TMP/out.txt" 2>&1; then
        objs="$objs $TMP/axpby.cu.o"
    else
        fail "(a) cuda/axpby.cu:"; cat "$TMP/out.txt"
    fi
else
    echo "skip: the build has no CUDA (no compile command for kernels/cuda/cuda_ops.c): cu_axpby not built"
fi

# The files the recipe touched under kernels/ (the fourth is test_ops.c, whose missing rows (e)
# finds): nothing else of kernels/ had to change for the op to compile, link and run.
touched=$(diff -rq "$ROOT/kernels" "$K" | sed -E 's#^Files .* and '"$K"'/(.*) differ$#\1#; s#^Only in '"$K"'(/?)(.*): (.*)#\2/\3#; s#^/##' | sort | tr '\n' ' ')
expect="cpu/elementwise.c ops_table.h "
[ $have_cuda = yes ] && expect="cpu/elementwise.c cuda/axpby.cu ops_table.h "
if [ "$touched" = "$expect" ]; then
    echo "ok: the recipe touched $touched+ tests/kernels/test_ops.c"
else
    fail "the recipe touched '$touched', expected '$expect'"
fi

# The driver: test_ops.c itself, its main renamed, so that its static coverage() runs against
# the copy's table; then the new op through its public prototype, and the completeness check.
cat >"$TMP/driver.c" <<'C'
#define main test_ops_main
#include "test_ops.c"
#undef main
#include "backend.h"
int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) { /* (e): the coverage check alone */
        coverage();
        return check_result("coverage");
    }
#ifndef WP_NO_NEW_OP
    wp_kern *k = kt_cpu(1);
    float y[3] = {1, 2, 3}, x[3] = {10, 20, 30};
    kern_axpby(k, y, 2.0f, x, 3.0f, 3); /* the expanded prototype, wrapper and slot */
    check_say(y[0] == 23 && y[1] == 46 && y[2] == 69, "kern_axpby: y = %g %g %g (23 46 69)", y[0], y[1], y[2]);
    kern_destroy(k);
    wp_kern_ops ops = wp_cpu_ops;
    ops.axpby = NULL;
    char err[256] = "";
    const char *miss = wp_kern_ops_missing(&ops);
    check_say(miss && strcmp(miss, "axpby") == 0 && wp_kern_ops_check(&ops, err, sizeof err) != WP_OK,
              "a table without axpby is refused: %s", err);
#endif
    return check_result("new op");
}
C
# link OUT OBJECTS...: test_kernels_ops's link line, its object replaced by ours (first, so that
# the library's own dispatch.c, cpu_ops.c, ... are not taken)
link() {
    local out=$1; shift
    (cd "$B" && eval "$(ninja -t commands tests/kernels/test_kernels_ops | tail -n 1 |
        sed "s# -o tests/kernels/test_kernels_ops tests/kernels/test_kernels_ops.p/test_ops.c.o # -o $out $* #")") \
        >"$TMP/out.txt" 2>&1
}
compile tests/kernels/test_ops.c "$TMP/driver.c" "$TMP/driver.o" "-I$ROOT/tests/kernels -O0" ||
    { fail "the driver (test_ops.c) with the new row:"; cat "$TMP/out.txt"; }
if link "$TMP/new_op" "$TMP/driver.o $objs"; then
    if "$TMP/new_op" >"$TMP/run.txt" 2>&1; then
        echo "ok (a): the row and both definitions compile; kern_axpby links and runs"
        echo "ok (d): a table that leaves axpby NULL is refused (wp_kern_ops_check, kern_create's check)"
    else
        fail "(a)/(d) the driver:"; cat "$TMP/run.txt"
    fi
    if "$TMP/new_op" coverage >"$TMP/run.txt" 2>&1; then
        fail "(e) test_ops.c's coverage check passed with no rows for axpby:"; cat "$TMP/run.txt"
    elif grep -q "no rows for kern_axpby" "$TMP/run.txt"; then
        echo "ok (e): test_ops.c's coverage check fails: $(grep 'no rows for kern_axpby' "$TMP/run.txt" | sed 's/^ *//')"
    else
        fail "(e) the coverage check failed for another reason:"; cat "$TMP/run.txt"
    fi
else
    fail "(a) the link with the new op:"; cat "$TMP/out.txt"
fi

# (b) a definition that disagrees with its row: a compiler error
sed 's/^void cpu_axpby(wp_kern \*k, void \*y, float a, const void \*x, float b, size_t n)/void cpu_axpby(wp_kern *k, void *y, float a, const void *x, double b, size_t n)/' \
    "$K/cpu/elementwise.c" >"$TMP/bad.c"
grep -q "double b, size_t n" "$TMP/bad.c" || fail "(b) the wrong signature was not written"
cp "$TMP/bad.c" "$K/cpu/bad.c"
if compile kernels/cpu/elementwise.c "$K/cpu/bad.c" "$TMP/bad.o"; then
    fail "(b) cpu_axpby with (..., double b, ...) compiled against the row's (..., float b, ...)"
elif grep -q "conflicting types for .cpu_axpby" "$TMP/out.txt"; then
    echo "ok (b): a cpu_axpby that disagrees with its row: $(grep -m1 -o "conflicting types for .cpu_axpby.*" "$TMP/out.txt")"
else
    fail "(b) the wrong signature failed for another reason:"; cat "$TMP/out.txt"
fi

# (c) no cpu_axpby: the table's entry names an undefined symbol, and the link says so
cp "$TMP/elementwise.orig.c" "$K/cpu/elementwise.c"
if ! compile kernels/cpu/elementwise.c "$K/cpu/elementwise.c" "$TMP/elementwise.c.o"; then
    fail "(c) elementwise.c without cpu_axpby:"; cat "$TMP/out.txt"
elif link "$TMP/undef" "$TMP/driver.o $objs"; then
    fail "(c) linked without a cpu_axpby"
elif grep -q "undefined reference to .cpu_axpby" "$TMP/out.txt"; then
    echo "ok (c): without cpu_axpby: $(grep -m1 -o "undefined reference to .cpu_axpby.*" "$TMP/out.txt")"
else
    fail "(c) the link failed for another reason:"; cat "$TMP/out.txt"
fi

# (e)'s control: the same check against the real table passes
rm -rf "$K" && cp -r "$ROOT/kernels" "$K" || exit 1
if compile tests/kernels/test_ops.c "$TMP/driver.c" "$TMP/plain.o" "-I$ROOT/tests/kernels -O0 -DWP_NO_NEW_OP" &&
   link "$TMP/plain" "$TMP/plain.o" && "$TMP/plain" coverage >"$TMP/run.txt" 2>&1; then
    echo "ok (e) control: the coverage check passes with the real table"
else
    fail "(e) control, the real table:"; cat "$TMP/out.txt" "$TMP/run.txt" 2>/dev/null
fi
[ $fails -eq 0 ] && echo "the recipe holds: table, cpu_<name>, cu_<name>, test_ops.c rows (4 files)" && exit 0
exit 1
