#!/usr/bin/env bash
# Pack bench_svd for a host where nothing can be installed (bench/device.sh runs it there): the benchmark
# relinked with its program interpreter and library path at /tmp/esdev, and every shared library `ldd`
# lists (the C library and the loader too, so the host's glibc version does not matter), packed into
# DEST/esdev.tar.gz (about 20 MB: what travels to the host is bounded). bench/device.sh unpacks it into
# /tmp/esdev first. An absolute interpreter path and an RPATH
# (not LD_LIBRARY_PATH) keep the host's own programs (python3) on the host's libraries, and keep
# /proc/self/exe the benchmark itself, so its restart with better OpenBLAS kernels works there too.
# Usage: bench/devbench-pack.sh [BUILD [DEST]]   (default build, .devbench; DEST is git-ignored)
set -euo pipefail
build=${1:-build}
dest=${2:-.devbench}
make -s "$build/libembedscope.a"
mkdir -p "$dest/lib"
libs=$(pkg-config --libs libmicrohttpd jansson openblas lapacke zlib libcrypto)
cflags=$(pkg-config --cflags openblas lapacke)
cc -std=c11 -O2 -g -D_GNU_SOURCE -Iinclude -Isrc $cflags -o "$dest/bench_svd" bench/bench_svd.c "$build/libembedscope.a" \
    $libs -lm -lpthread -Wl,--dynamic-linker=/tmp/esdev/ld-linux-x86-64.so.2 -Wl,-rpath,/tmp/esdev \
    -Wl,--disable-new-dtags
# the libraries as this machine resolves them (alternatives and symlinks followed), the loader included
ldd "$dest/bench_svd" | awk '/=> \//{print $3} /^\s*\/.*ld-linux/{print $1}' | while read -r lib; do
    cp -L "$lib" "$dest/lib/$(basename "$lib")"
done
cp -L /lib64/ld-linux-x86-64.so.2 "$dest/lib/ld-linux-x86-64.so.2"
mv "$dest/bench_svd" "$dest/lib/bench_svd"
tar -C "$dest/lib" -czf "$dest/esdev.tar.gz" .
rm -rf "$dest/lib"
ls -la "$dest"
