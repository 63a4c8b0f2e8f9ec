#!/bin/bash
# Adding an analysis edits no hand-written shared file (docs/development.md, "Adding an
# analysis"): in a temporary copy of the checkout and of BUILD's objects, one new file
# src/api/analyses/scratch.c, then `make BUILD/embedscope` (the real rules: the generated
# list picks the file up, analyses.o and scratch.o are compiled, nothing else of src/api),
# and the daemon's --dump-api must list the scratch analysis and its route, in its order
# (before compare, after the others). Then the file's removal must drop it again (HAVE_NODE=:
# the dashboard bundle is taken as built). The
# last line is "analysis files: N passed, N failed".
#   tests/api/analysis_files.sh [BUILD]
set -u
build=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
finish() { echo "analysis files: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

[ -x "$root/$build/embedscope" ] || { bad "no $build/embedscope (build it first)"; finish; }
# The checkout's files (mtimes kept, so make rebuilds only what the new file changes) and the objects.
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp -a --parents -t "$tmp" 2>/dev/null)
mkdir -p "$tmp/$build"
(cd "$root/$build" && cp -a --parents src web gen libembedscope.a commit.stamp web.stamp embedscope "$tmp/$build/" 2>/dev/null)
[ -d "$root/build-web" ] && cp -a "$root/build-web" "$tmp/"

cat >"$tmp/src/api/analyses/scratch.c" <<'C'
/* A scratch analysis (tests/api/analysis_files.sh): the mean of the selected rows' norms. */
#include "common.h"

typedef struct scratch_params {
    double scale;
} scratch_params;

static const es_pspec scratch_spec[] = {
    {.name = "scale", .kind = ES_P_REAL, .def = 1, .min = 0, .max = 10, .offset = ES_FIELD(scratch_params, scale)},
    {0}};

static int fill_scratch(const es_run *run, es_out *out, es_err *err)
{
    (void)err;
    const scratch_params *p = run->params;
    json_object_set_new(out->root, "scale", es_jnum(&out->jc, "scale", p->scale));
    return 0;
}

static const es_example_case ex_scratch_cases[] = {{"scale", "scale=1", "scale=2", "scale=-1"}, {0}};
static const es_examples ex_scratch = {.query = "rows=0:4", .cases = ex_scratch_cases, .light = "rows=0:2",
                                       .heavy = "rows=0:2"};

ES_DESCRIPTOR(scratch, 1000) = {
    .examples = &ex_scratch,
    .name = "scratch", .route = "/v1/models/{model}/matrices/{matrix}/scratch", .shape = ES_SHAPE_ONE,
    .params_size = sizeof(scratch_params), .spec = scratch_spec, .fill = fill_scratch, .cost_params = "rows"};
C

names() {   # the analyses --dump-api lists, in order, one line
    "$tmp/$build/embedscope" --dump-api | python3 -c 'import json, sys; print(" ".join(a["name"] for a in json.load(sys.stdin)["analyses"]))'
}
routes() {
    "$tmp/$build/embedscope" --dump-api | python3 -c 'import json, sys; print(" ".join(r["path"] for r in json.load(sys.stdin)["routes"]))'
}
before=$("$root/$build/embedscope" --dump-api | python3 -c 'import json, sys; print(" ".join(a["name"] for a in json.load(sys.stdin)["analyses"]))')
log=$tmp/make.log
if make -C "$tmp" --no-print-directory HAVE_NODE= "$build/embedscope" >"$log" 2>&1; then
    ok "built with src/api/analyses/scratch.c added"
    got=$(names)
    want=$(sed 's/ compare$/ scratch compare/' <<<"$before")
    [ "$got" = "$want" ] && ok "--dump-api lists scratch after the others, before compare" \
        || bad "--dump-api lists: $got (expected: $want)"
    grep -qw '/v1/models/{model}/matrices/{matrix}/scratch' <<<"$(routes)" && ok "its route is served" \
        || bad "no route /v1/models/{model}/matrices/{matrix}/scratch"
    # What the new file made make compile: the list's user (analyses.c) and the file itself, no other
    # file of src/api (version.c: the copy is no git checkout, so its commit is "unknown").
    compiled=$(grep -oE -- '-c src/api/[a-z_/]+\.c' "$log" | sed 's/^-c //' | grep -v '^src/api/version.c$' | sort | paste -sd' ')
    [ "$compiled" = "src/api/analyses.c src/api/analyses/scratch.c" ] && ok "compiled: $compiled" \
        || bad "compiled in src/api: $compiled (expected analyses.c and analyses/scratch.c only)"
else
    tail -20 "$log"
    bad "make with the scratch analysis failed"
fi
rm "$tmp/src/api/analyses/scratch.c"
rm -f "$tmp/$build/src/api/analyses/scratch."[od]
if make -C "$tmp" --no-print-directory HAVE_NODE= "$build/embedscope" >"$log" 2>&1; then
    got=$(names)
    [ "$got" = "$before" ] && ok "removing the file drops it" || bad "after removing it: $got"
else
    tail -20 "$log"
    bad "make after removing the scratch analysis failed"
fi
finish
