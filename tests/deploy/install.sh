#!/usr/bin/env bash
# Build hygiene, then `make install` into temporary directories, checked:
#   0. the user's CFLAGS add to the project's flags (make -n): `CFLAGS=-O0` and `CFLAGS+=-Wshadow`
#      keep -std=c11 -Wall -Wextra -Werror and come last;
#   1. a staged install (PREFIX=/usr DESTDIR=tmp): every file where a package would put it,
#      the unit filled in, the service configuration's absolute paths;
#   2. a real install under a temporary PREFIX: the installed binary, started from
#      another directory, loads its embedded default's weights from PREFIX/share (not from
#      the checkout); the service configuration passes --check-config (its state paths
#      moved into the temporary directory); the man page renders, with ENVIRONMENT (every
#      variable src/ reads), EXIT STATUS and FILES;
#   3. systemd-analyze verify of the unit (when systemd-analyze is installed).
# Last line: "install: N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
root=$PWD
passed=0; failed=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@" >/dev/null 2>&1; then pass "$what"; else fail "$what"; fi; }
tmp=$(mktemp -d /tmp/embedscope-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export OPENBLAS_NUM_THREADS=1

# 0. the user's flags come after the project's
for flags in "CFLAGS=-O0" "CFLAGS+=-Wshadow"; do
    line=$(make --no-print-directory -n -B "$flags" build/src/core/lru.o 2>&1 | grep -- ' -c src/core/lru.c')
    user=${flags#CFLAGS*=}
    if [[ $line == *"-std=c11 -Wall -Wextra -Werror -O2"*" $user "* ]]; then
        pass "make $flags: the project's flags kept, $user after them"
    else
        fail "make $flags: $line"
    fi
done

# 1. staged, as a Debian package would: PREFIX=/usr, DESTDIR=stage
stage=$tmp/stage
if make --no-print-directory install PREFIX=/usr DESTDIR="$stage" >"$tmp/make1.log" 2>&1; then
    pass "make install PREFIX=/usr DESTDIR=..."
else
    fail "make install PREFIX=/usr DESTDIR=...:"; tail -20 "$tmp/make1.log"
fi
for f in usr/bin/embedscope usr/share/man/man8/embedscope.8 usr/share/embedscope/config/embedscope.json \
         usr/share/embedscope/data/gpt2-small/wpe.npy etc/embedscope/embedscope.json \
         lib/systemd/system/embedscope.service; do
    check "staged $f" test -s "$stage/$f"
done
unit=$stage/lib/systemd/system/embedscope.service
check "unit: ExecStart names /usr/bin and /etc" grep -qx 'ExecStart=/usr/bin/embedscope --config /etc/embedscope/embedscope.json' "$unit"
for key in 'Type=notify' 'NotifyAccess=main' 'DynamicUser=yes' 'ProtectSystem=strict' 'StateDirectory=embedscope' 'ExecReload=/bin/kill -HUP $MAINPID'; do
    check "unit: $key" grep -qxF "$key" "$unit"
done
conf=$stage/etc/embedscope/embedscope.json
check "service config: data_dir /usr/share/embedscope/data" grep -q '"data_dir": "/usr/share/embedscope/data"' "$conf"
check "service config: cache_dir and uploads.dir in /var/lib/embedscope" \
    grep -q '"cache_dir": "/var/lib/embedscope/cache"' "$conf"
check "service config: uploads.dir" grep -q '"dir": "/var/lib/embedscope/uploads"' "$conf"
# (its debug information names the source files, as any -g build's does: look past it)
strip -o "$tmp/stripped" "$stage/usr/bin/embedscope"
check "binary: no path of the checkout in it" bash -c "! grep -qF '$root' '$tmp/stripped'"

# 2. a real install under a temporary PREFIX, run from elsewhere
prefix=$tmp/prefix
if make --no-print-directory install PREFIX="$prefix" >"$tmp/make2.log" 2>&1; then
    pass "make install PREFIX=tmp"
else
    fail "make install PREFIX=tmp:"; tail -20 "$tmp/make2.log"
fi
out=$(cd / && "$prefix/bin/embedscope" --check-config 2>&1)
if [ $? -eq 0 ] && grep -qF "from $prefix/share/embedscope/data/gpt2-small/wpe.npy" <<<"$out"; then
    pass "installed binary: the embedded default's weights come from PREFIX/share/embedscope/data"
else
    fail "installed binary --check-config (from /):"; echo "$out" | tail -10
fi
sed "s#/var/lib/embedscope#$tmp/state#g" "$prefix/etc/embedscope/embedscope.json" >"$tmp/service.json"
mkdir -p "$tmp/state"  # the unit's StateDirectory
out=$("$prefix/bin/embedscope" --config "$tmp/service.json" --check-config 2>&1)
[ $? -eq 0 ] && pass "service configuration passes --check-config" || { fail "service configuration:"; echo "$out" | tail -10; }
if command -v man >/dev/null; then
    out=$(man -l "$prefix/share/man/man8/embedscope.8" 2>&1)
    if grep -q -- '--check-config' <<<"$out" && grep -q 'OPTIONS' <<<"$out" && grep -q 'SYNOPSIS' <<<"$out"; then
        pass "man page renders with SYNOPSIS and OPTIONS from --help"
    else
        fail "man page:"; echo "$out" | head -20
    fi
    for section in ENVIRONMENT 'EXIT STATUS' FILES; do
        check "man page has $section" grep -q "^$section" <<<"$out"
    done
    # every variable the daemon reads (getenv in src/; ES_TEST_* are the tests' hooks) is in ENVIRONMENT
    env_section=$(sed -n '/^ENVIRONMENT/,/^EXIT STATUS/p' <<<"$out")
    for var in $(grep -rhoE 'getenv\("[A-Z_]+"\)' src | sed -E 's/getenv\("([A-Z_]+)"\)/\1/' | sort -u | grep -v '^ES_TEST_'); do
        check "man page ENVIRONMENT names $var (read by the daemon)" grep -q "^ *$var\b" <<<"$env_section"
    done
fi

# 3. the unit, as systemd reads it (its ExecStart must exist: verify the PREFIX one; its
#    man page is not on the MANPATH, it was checked above)
if command -v systemd-analyze >/dev/null; then
    out=$(SYSTEMD_LOG_LEVEL=notice systemd-analyze verify --man=no "$prefix/lib/systemd/system/embedscope.service" 2>&1)
    rc=$?
    # verify also reports units it cannot load from a root it does not own (none expected)
    if [ $rc -eq 0 ] && ! grep -qiE 'unknown|invalid|failed|ignoring' <<<"$out"; then
        pass "systemd-analyze verify embedscope.service"
    else
        fail "systemd-analyze verify:"; echo "$out" | head -20
    fi
else
    fail "systemd-analyze missing: make test installs Debian's systemd package"
fi
echo "install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
