# embedscope — build, set-up and tests.  `make run`, `make test` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := all

BUILD ?= build
SAN ?= 0
PREFIX ?= /usr/local
CONFIG_DIR ?= $(CURDIR)/config
export OPENBLAS_NUM_THREADS ?= 1

# Debian 12 packages the build and the tests need; `make deps` installs the missing ones.
DEB_PKGS := gcc make pkg-config libmicrohttpd-dev libjansson-dev libopenblas-dev liblapacke-dev \
            check zlib1g-dev libssl-dev python3 python3-numpy curl
PKGS := libmicrohttpd jansson openblas lapacke check zlib libcrypto

CC ?= cc
CFLAGS_BASE := -std=c11 -Wall -Wextra -Werror -O2 -g -D_GNU_SOURCE -Iinclude -Isrc \
               -DES_DEFAULT_CONFIG_DIR='"$(CONFIG_DIR)"'
ifeq ($(SAN),1)
  override BUILD := $(BUILD)-san
  CFLAGS_BASE += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
endif
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm -lpthread
CFLAGS := $(CFLAGS_BASE) $(PKG_CFLAGS) $(CFLAGS)

LIB_SRC := $(sort $(shell find src/core src/store src/linalg src/analysis -name '*.c' 2>/dev/null))
HTTP_SRC := $(sort $(shell find src/http -name '*.c' 2>/dev/null))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/src/core/embedded.o
HTTP_OBJ := $(HTTP_SRC:%.c=$(BUILD)/%.o)
LIB := $(BUILD)/libembedscope.a
BIN := $(BUILD)/embedscope
TEST_SRC := $(sort $(shell find tests -name 'test_*.c' 2>/dev/null))
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))

.PHONY: all deps run test check unit-tests san-tests http-tests clean bench fuzz golden help

all: $(BIN) $(TEST_BIN)

help:
	@echo "make run    install missing build dependencies, build, serve the embedded default"
	@echo "make test   same set-up, then every test (normal and ASan+UBSan builds, HTTP tests)"
	@echo "make bench  benchmarks against numpy and raw LAPACK (bench/)"

deps:
	@scripts/install-deps.sh $(DEB_PKGS)
	@# Node.js for the OpenAPI linter: keep whatever node/npm the machine has (the
	@# nodesource build here), else take Debian's.
	@command -v node >/dev/null && command -v npm >/dev/null || scripts/install-deps.sh nodejs npm

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# config/embedscope.json and openapi.yaml are compiled into the binary (.incbin).
$(BUILD)/src/core/embedded.o: src/core/embedded.S config/embedscope.json openapi.yaml
	@mkdir -p $(dir $@)
	$(CC) -I. -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(HTTP_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $(HTTP_OBJ) $(LIB) $(PKG_LIBS)

$(BUILD)/tests/%: tests/%.c $(LIB) $(filter-out $(BUILD)/src/http/main.o,$(HTTP_OBJ)) tests/check_main.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(filter-out $(BUILD)/src/http/main.o,$(HTTP_OBJ)) $(LIB) $(LDFLAGS) $(PKG_LIBS)

run: deps $(BIN)
	$(BIN) $(ARGS)

# Every test: unit tests in the normal build and again under ASan+UBSan, then the
# HTTP integration tests (README curl examples included) against both daemons.
test: deps
	@tests/run-all.sh

unit-tests: $(TEST_BIN) $(BIN)
	@tests/run-unit.sh $(BUILD) $(TEST_BIN)

http-tests: $(BIN)
	@tests/http/run.sh $(BIN)

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDFLAGS) $(PKG_LIBS)

bench: deps $(BUILD)/bench/bench_svd
	@bench/run.sh $(BUILD)

golden:
	/usr/bin/python3 tests/golden/make_golden.py

clean:
	rm -rf build build-san

-include $(shell find build build-san -name '*.d' 2>/dev/null)

# Fuzzers for the two strict loaders (libFuzzer + ASan + UBSan, clang-14):
# `make fuzz [FUZZ_SECONDS=30]` builds tests/fuzz/fuzz_*.c into $(BUILD)-fuzz and runs
# each for FUZZ_SECONDS, starting from a seed corpus written by tests/fuzz/make_corpus.py.
FUZZ_DEB_PKGS := clang-14 libclang-rt-14-dev
FUZZ_SECONDS ?= 30
FUZZ_DIR := $(BUILD)-fuzz
FUZZ_LIB_SRC := src/core/core.c src/store/file.c src/store/matrix.c src/store/npy.c \
                src/store/safetensors.c src/store/tensor.c
fuzz:
	@scripts/install-deps.sh $(DEB_PKGS) $(FUZZ_DEB_PKGS)
	@mkdir -p $(FUZZ_DIR)/corpus/npy $(FUZZ_DIR)/corpus/safetensors
	/usr/bin/python3 tests/fuzz/make_corpus.py $(FUZZ_DIR)/corpus/npy $(FUZZ_DIR)/corpus/safetensors
	set -e; for src in $(FUZZ_SRC); do \
	    name=$$(basename $$src .c); \
	    clang-14 -std=c11 -g -O1 -D_GNU_SOURCE -Iinclude -Isrc $(PKG_CFLAGS) \
	        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	        -o $(FUZZ_DIR)/$$name $$src $(FUZZ_LIB_SRC) $$(pkg-config --libs jansson libcrypto) -lm; \
	    $(FUZZ_DIR)/$$name -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 \
	        $(FUZZ_DIR)/corpus/$${name#fuzz_}; \
	done
