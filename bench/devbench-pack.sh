#!/usr/bin/env bash
# Pack the benchmarks' programs for a host where nothing can be installed (bench/device.sh and
# bench/device_http.sh run them there): bench_svd and the daemon embedscope relinked with their program
# interpreter and library path at /tmp/esdev, this machine's wrk and nginx (Debian's binaries, run there
# through the packed loader: /tmp/esdev/ld-linux-x86-64.so.2 --library-path /tmp/esdev PROGRAM), and every
# shared library `ldd` lists for the four (the C library and the loader too, so the host's glibc version
# does not matter), into DEST/esdev.tar.gz (gzip -9, our two binaries stripped: about 25 MB; what travels to
# the host is bounded, 64 MiB with the tracked files, which this script checks). The scripts unpack it into
# /tmp/esdev first. An absolute interpreter path and an RPATH (not LD_LIBRARY_PATH) keep the host's own
# programs (python3) on the host's libraries, and keep /proc/self/exe the benchmark or the daemon itself,
# so their restart with better OpenBLAS kernels works there too.
# Usage: bench/devbench-pack.sh [BUILD [DEST]]   (default build, .devbench; DEST is git-ignored)
set -euo pipefail
build=${1:-build}
dest=${2:-.devbench}
make -s "$build/libembedscope.a" "$build/embedscope"
rm -rf "$dest/lib"
mkdir -p "$dest/lib"
pack_ld=(-Wl,--dynamic-linker=/tmp/esdev/ld-linux-x86-64.so.2 -Wl,-rpath,/tmp/esdev -Wl,--disable-new-dtags)
libs=$(pkg-config --libs libmicrohttpd jansson openblas lapacke zlib libcrypto)
cflags=$(pkg-config --cflags openblas lapacke)
cc -std=c11 -O2 -g -D_GNU_SOURCE -Iinclude -Isrc $cflags -o "$dest/lib/bench_svd" bench/bench_svd.c "$build/libembedscope.a" \
    $libs -lm -lpthread "${pack_ld[@]}"
# the daemon: the build's own objects and libraries (the Makefile's link line), relinked
IFS='|' read -r http_obj lib ldflags pkg_libs < <(make -s --no-print-directory BUILD="$build" \
    --eval 'devbench-link-vars: ; @echo "$(HTTP_OBJ)|$(LIB)|$(ES_LDFLAGS) $(LDFLAGS)|$(PKG_LIBS)"' devbench-link-vars)
# shellcheck disable=SC2086
cc $ldflags -o "$dest/lib/embedscope" $http_obj $lib $pkg_libs "${pack_ld[@]}"
strip "$dest/lib/bench_svd" "$dest/lib/embedscope"
cp -L "$(command -v wrk)" "$dest/lib/wrk"
cp -L /usr/sbin/nginx "$dest/lib/nginx"
# the libraries as this machine resolves them (alternatives and symlinks followed), the loader included
for prog in bench_svd embedscope wrk nginx; do
    ldd "$dest/lib/$prog" | awk '/=> \//{print $3} /^\s*\/.*ld-linux/{print $1}'
done | sort -u | while read -r so; do
    cp -L "$so" "$dest/lib/$(basename "$so")"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$dest/lib/ld-linux-x86-64.so.2"
tar -C "$dest/lib" -cf - . | gzip -9 >"$dest/esdev.tar.gz"
rm -rf "$dest/lib"
ls -la "$dest"
# what travels to the host: the tracked files and this tarball, 64 MiB at most
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
packed=$(stat -c %s "$dest/esdev.tar.gz")
echo "tracked files $((tracked / 1048576)) MiB + esdev.tar.gz $((packed / 1048576)) MiB = $(((tracked + packed) / 1048576)) MiB (limit 64)"
[ $((tracked + packed)) -lt $((62 * 1048576)) ] || { echo "devbench-pack: over 62 MiB: it would not travel" >&2; exit 1; }
