# embedscope — build, set-up and tests.  `make run`, `make test` (see README.md).
SHELL := /bin/bash
.DEFAULT_GOAL := all

BUILD ?= build
SAN ?= 0
PREFIX ?= /usr/local
CONFIG_DIR ?= $(CURDIR)/config
export OPENBLAS_NUM_THREADS ?= 1
# The commit compiled into the binary (--version, /v1, embedscope_build_info);
# "unknown" outside a git checkout. The container build passes it explicitly.
ifeq ($(origin ES_COMMIT),undefined)
  ES_COMMIT := $(shell git describe --always --dirty --abbrev=12 --exclude='*' 2>/dev/null || echo unknown)
endif

# Debian 12 packages, installed with --no-install-recommends and no service started
# (scripts/install-deps.sh). `make run` installs only what building and running the
# daemon needs; `make test` adds the test tools.
RUN_DEB_PKGS := gcc g++ libc6-dev make pkg-config libmicrohttpd-dev libjansson-dev libopenblas-dev liblapacke-dev \
                zlib1g-dev libssl-dev libsystemd-dev libpcre2-dev libdragonbox-dev libfftw3-dev
TEST_DEB_PKGS := check python3 python3-numpy python3-requests python3-yaml python3-pandas python3-pip curl \
                 nginx prometheus systemd
# Node.js and npm build the dashboard (web/): Debian 12's node 18 builds it byte for byte
# like newer ones. Without them the daemon serves a page saying how to build it.
WEB_DEB_PKGS := nodejs npm
PKGS := libmicrohttpd jansson openblas lapacke zlib libcrypto libsystemd libpcre2-8 fftw3 fftw3l
TEST_PKGS := check

# The project's own flags; CFLAGS and LDFLAGS are the user's and come last, so
# `make CFLAGS+=-Wshadow` or `make CFLAGS=-O0` add to these instead of replacing them.
CC ?= cc
# -Wshadow and -Wconversion (in C, -Wsign-conversion too) are the project's own: every build of src/
# and tests/ checks them (make warnings passes the C files no build compiles through them).
WARN_FLAGS := -Wshadow -Wconversion
ES_CFLAGS := -std=c11 -Wall -Wextra -Werror -O2 -g -D_GNU_SOURCE -Iinclude -Isrc $(WARN_FLAGS)
ES_LDFLAGS :=
# The one C++ file (src/core/shortest.cc: Dragonbox, a header-only library, behind a C
# interface), built without exceptions or RTTI so the link needs no C++ runtime.
CXX ?= c++
ES_CXXFLAGS := -std=c++17 -Wall -Wextra -Werror -O2 -g -DNDEBUG -fno-exceptions -fno-rtti \
               $(addprefix -I,$(firstword $(wildcard /usr/include/dragonbox-*/)))
# The ASan+UBSan build keeps line tables only (-g1: a report still names file:line in every frame), no
# variables' descriptions: 93 CPU s to build against 109 with -g (measured quiet, 2 cores).
ifeq ($(SAN),1)
  override BUILD := $(BUILD)-san
  ES_CFLAGS += -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  ES_CXXFLAGS += -g1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  ES_LDFLAGS += -fsanitize=address,undefined
endif
# pkg-config's flags, computed at their first use (a recipe, after `deps` ran), once:
# `$(call lazy,VAR,COMMAND)` as the whole value of VAR replaces VAR by COMMAND's output.
lazy = $(eval $(1) := $$(shell $(2)))$($(1))
PKG_CFLAGS = $(call lazy,PKG_CFLAGS,pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LDLIBS = $(call lazy,PKG_LDLIBS,pkg-config --libs $(PKGS) 2>/dev/null)
PKG_LIBS = $(PKG_LDLIBS) -lm -lpthread
TEST_LIBS = $(call lazy,TEST_LIBS,pkg-config --libs $(TEST_PKGS) 2>/dev/null)
COMPILE = $(CC) $(ES_CFLAGS) $(PKG_CFLAGS) $(CFLAGS)

# Layers, lowest first: each may use only the ones before it (docs/development.md).
# The library is every layer but the transport (src/http), whose objects only the daemon
# and tests/http link; the dashboard's assets are the service's (src/api/assets.c).
LAYERS := core store linalg analysis app api
LIB_SRC := $(sort $(foreach l,$(LAYERS),$(shell find src/$(l) -name '*.c' 2>/dev/null)))
HTTP_SRC := $(sort $(shell find src/http -name '*.c' 2>/dev/null))
LIB_CXX_SRC := $(sort $(shell find src/core -name '*.cc' 2>/dev/null))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(LIB_CXX_SRC:%.cc=$(BUILD)/%.o) $(BUILD)/src/core/embedded.o $(BUILD)/web/assets.o
HTTP_OBJ := $(HTTP_SRC:%.c=$(BUILD)/%.o)
LIB := $(BUILD)/libembedscope.a
BIN := $(BUILD)/embedscope
TEST_SRC := $(sort $(shell find tests -name 'test_*.c' 2>/dev/null))
TEST_BIN := $(TEST_SRC:%.c=$(BUILD)/%)
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))

.PHONY: all daemon objs deps test-deps web-deps dashboard browser-deps run test test-full check unit-tests layers analysis-files warnings san-tests http-tests jobs-real browser-tests clean bench bench-cost bench-offsets bench-fairness bench-llama bench-umap bench-explorer fuzz golden openapi help

# The daemon, and the unit test programs when Check is installed (`make run` does not
# install it; `make test` does).
HAVE_CHECK := $(shell pkg-config --exists $(TEST_PKGS) 2>/dev/null && echo yes)
all: $(BIN) $(if $(HAVE_CHECK),$(TEST_BIN))
ifeq ($(HAVE_CHECK),)
	@echo "embedscope: built $(BIN); the unit tests need Check (make test-deps, or apt-get install check)"
endif
# The daemon alone (make test's normal build: its unit tests run in the ASan+UBSan build, tests/run-all.sh).
daemon: $(BIN)

help:
	@echo "make run    install missing build dependencies, build, serve the embedded default"
	@echo "make test   same set-up plus the test tools, then every test (unit, HTTP, browser, deployment, short soak and fuzz)"
	@echo "make test-full  make test with every HTTP module in full against the ASan+UBSan daemon too"
	@echo "make dashboard  install Debian's nodejs and npm when missing and bundle the dashboard (web/)"
	@echo "make bench  benchmarks against numpy and raw LAPACK (bench/)"
	@echo "make openapi  regenerate openapi.yaml from the daemon's tables (--dump-api) and openapi.base.yaml"
	@echo "make image  the container image (podman, docker format): localhost/embedscope:latest"
	@echo "make k8s-test  deploy/k8s under podman kube play: probes, non-root, one analysis (docs/operations.md)"

deps:
	@scripts/install-deps.sh $(RUN_DEB_PKGS)

# Node.js and npm build the dashboard (web/) and run the OpenAPI linter and the browser
# tests: keep whatever node/npm the machine has, else take Debian's.
web-deps:
	@command -v node >/dev/null && command -v npm >/dev/null || scripts/install-deps.sh $(WEB_DEB_PKGS)

test-deps: deps web-deps browser-deps soak-deps fuzz-deps
	@scripts/install-deps.sh $(TEST_DEB_PKGS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(COMPILE) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(ES_CXXFLAGS) $(CXXFLAGS) -MMD -MP -c $< -o $@

# config/embedscope.json and openapi.yaml are compiled into the binary (.incbin).
$(BUILD)/src/core/embedded.o: src/core/embedded.S config/embedscope.json openapi.yaml
	@mkdir -p $(dir $@)
	$(CC) -I. -c $< -o $@

# The browser dashboard (web/): npm installs the pinned libraries (web/package-lock.json),
# web/build.mjs bundles and gzips the assets into $(WEB_DIR) and writes the assembly that
# compiles them into the daemon (served at / and /assets/, see src/api/assets.c). One
# $(WEB_DIR) serves every build (normal, ASan, fuzz).
WEB_DIR := build-web
# Without node and npm the daemon is built with the bundle already in $(WEB_DIR) taken as it
# is (the container build copies one in), else with a one-page stand-in saying how to build
# the dashboard (scripts/web-placeholder.sh); web.stamp rebuilds assets.o when that changes.
HAVE_NODE := $(shell command -v node >/dev/null && command -v npm >/dev/null && echo yes)
WEB_ASM := $(if $(HAVE_NODE)$(wildcard $(WEB_DIR)/assets.S),$(WEB_DIR)/assets.S,$(WEB_DIR)/placeholder/assets.S)
ifneq ($(HAVE_NODE),)
web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	cd web && npm ci --prefer-offline --no-audit --no-fund --loglevel=error

$(WEB_DIR)/assets.S: web/build.mjs $(wildcard web/src/*) web/node_modules/.package-lock.json
	node web/build.mjs $(WEB_DIR)
endif

$(WEB_DIR)/placeholder/assets.S: scripts/web-placeholder.sh
	scripts/web-placeholder.sh $(WEB_DIR)/placeholder

$(BUILD)/web.stamp: FORCE
	@mkdir -p $(BUILD)
	@echo '$(WEB_ASM)' | cmp -s - $@ || echo '$(WEB_ASM)' >$@

$(BUILD)/web/assets.o: $(WEB_ASM) $(BUILD)/web.stamp
	@mkdir -p $(dir $@)
	$(CC) -I. -c $< -o $@

dashboard: web-deps
	@$(MAKE) --no-print-directory $(WEB_DIR)/assets.S

# version.o alone carries the commit; the stamp changes (and version.o is
# rebuilt) only when the commit does.
$(BUILD)/commit.stamp: FORCE
	@mkdir -p $(BUILD)
	@echo '$(ES_COMMIT)' | cmp -s - $@ || echo '$(ES_COMMIT)' >$@
$(BUILD)/src/api/version.o: $(BUILD)/commit.stamp
$(BUILD)/src/api/version.o: ES_CFLAGS += -DES_COMMIT='"$(ES_COMMIT)"'
# The analysis table (src/api/analyses.c) lists the descriptors of the files present in
# src/api/analyses/ (tools/gen_analyses.sh; docs/development.md, "Adding an analysis"): the
# list is written at every build but replaced only when it changed, so adding or removing an
# analysis' file rebuilds analyses.o and nothing else of src/api. Its temporary file is the
# shell's own (its PID): make test's lanes run make at the same time in one checkout.
ANALYSES_LIST := $(BUILD)/gen/analyses_list.h
$(ANALYSES_LIST): FORCE
	@mkdir -p $(dir $@)
	@tmp=$@.$$$$.tmp; tools/gen_analyses.sh src/api/analyses/*.c >$$tmp || { rm -f $$tmp; exit 1; }; \
	 if cmp -s $$tmp $@; then rm -f $$tmp; else mv -f $$tmp $@; fi
$(BUILD)/src/api/analyses.o: $(ANALYSES_LIST)
$(BUILD)/src/api/analyses.o: ES_CFLAGS += -I$(BUILD)/gen
# Where the embedded default configuration's relative paths (its data_dir) start: the
# checkout's config/ for this build, the installed share/embedscope/config for `make install`'s.
$(BUILD)/src/app/config.o: ES_CFLAGS += -DES_DEFAULT_CONFIG_DIR='"$(CONFIG_DIR)"'
.PHONY: FORCE

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The library's and the transport's objects but the dashboard's (web/assets.o): what a build can
# compile while the dashboard is still being bundled (tests/run-all.sh starts the ASan+UBSan build so).
objs: $(filter-out $(BUILD)/web/assets.o,$(LIB_OBJ)) $(HTTP_OBJ)

$(BIN): $(HTTP_OBJ) $(LIB)
	$(CC) $(ES_LDFLAGS) $(LDFLAGS) -o $@ $(HTTP_OBJ) $(LIB) $(PKG_LIBS)

# The layering is enforced by the link: tests/<layer>/ programs are linked with
# the object files of that layer and the ones below it only (objects, not an
# archive, so a call upwards is an undefined reference); tests/http gets the
# whole library and the transport.
LAYER_OBJ_core := $(filter $(BUILD)/src/core/%,$(LIB_OBJ))
LAYER_OBJ_store := $(LAYER_OBJ_core) $(filter $(BUILD)/src/store/%,$(LIB_OBJ))
LAYER_OBJ_linalg := $(LAYER_OBJ_store) $(filter $(BUILD)/src/linalg/%,$(LIB_OBJ))
LAYER_OBJ_analysis := $(LAYER_OBJ_linalg) $(filter $(BUILD)/src/analysis/%,$(LIB_OBJ))
LAYER_OBJ_app := $(LAYER_OBJ_analysis) $(filter $(BUILD)/src/app/%,$(LIB_OBJ))
LAYER_OBJ_api := $(LIB_OBJ)
LAYER_OBJ_http := $(LIB_OBJ) $(filter-out $(BUILD)/src/http/main.o,$(HTTP_OBJ))
# The test programs' own code is compiled at -O1 (TEST_OPT, before the user's CFLAGS, which still win):
# their time is in the library's code, built -O2 like the daemon, and -O1 halves their compile
# (tests/api/test_params.c under ASan+UBSan 4.0 -> 2.3 CPU s; the test programs were 75 of the
# ASan+UBSan build's ~130 CPU s) while the ASan+UBSan unit programs take the same CPU (test_svd
# 21.3 at -O1 against 23.4 at -O2, test_cosine 17.2 against 16.4, at load 15).
TEST_OPT := -O1
# The test programs are linked by gold where binutils has it (Debian's does): each of the 43 links every
# object of its layers, and gold does it in a third of the CPU of the default linker (tests/api/test_compute:
# 0.12 against 0.42 CPU s in the normal build, 0.17 against 0.50 under ASan+UBSan); the daemon keeps the default.
TEST_LD := $(if $(shell command -v ld.gold 2>/dev/null),-fuse-ld=gold)
define test_rule
$(BUILD)/tests/$(1)/%: tests/$(1)/%.c $$(LAYER_OBJ_$(1)) tests/check_main.h
	@mkdir -p $$(dir $$@)
	$$(CC) $$(ES_CFLAGS) $$(TEST_OPT) $$(PKG_CFLAGS) $$(CFLAGS) -Itests -o $$@ $$< $$(LAYER_OBJ_$(1)) $$(TEST_LD) $$(ES_LDFLAGS) $$(LDFLAGS) $$(TEST_LIBS) $$(PKG_LIBS)
endef
$(foreach l,$(LAYERS) http,$(eval $(call test_rule,$(l))))

# Dependencies first, then a second make: pkg-config's flags and the dashboard's
# presence are read once the packages are there. It builds with a job per core, so where
# node and npm are installed the dashboard's npm ci (offline first: the npm cache before the
# registry) and bundle start first and run beside the C compile instead of after it
# (docs/development.md).
RUN_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
run: deps
	@$(MAKE) --no-print-directory -j$(RUN_JOBS) $(BUILD)/web/assets.o $(BIN)
	$(BIN) $(ARGS)

# Every test: unit tests under ASan+UBSan (`make test-full`: in the normal build too), the
# HTTP integration tests (the curl examples of README.md and docs/ included), each module against one of
# the two daemons (HTTP_NORMAL_ONLY below), the browser tests, the deployment checks, a short soak and a
# short fuzz run (tests/run-all.sh).
test: test-deps
	@tests/run-all.sh

# make test with every HTTP module run in full against the ASan+UBSan daemon too and the unit tests in the
# normal build too (HTTP_TESTS_FULL=1;
# TESTS_FULL=1: the unit tests' random samples whole, test_dtoa's 4 times as many;
# see http-tests below); the long soak and fuzz runs stay `make soak` and `make fuzz`.
test-full: test-deps
	@HTTP_TESTS_FULL=1 TESTS_FULL=1 tests/run-all.sh

# A Check timeout is a guard against a hang, never a check of speed: every one is multiplied by 10 (a
# test's 60 s become 10 minutes, the HTTP tests' HANG_S), since on a loaded machine a test of a second's
# CPU takes minutes of wall (tests/store/test_source's npy_source ran past 60 s with two busy loops per
# core and make test's lanes); under ASan+UBSan, where a test takes two to three times as long (test_svd:
# 5 s of CPU, 12 s there), by 20.
SAN_TIMEOUT_MULTIPLIER := $(if $(filter 1,$(SAN)),20,10)
unit-tests: $(TEST_BIN) $(BIN)
	@CK_TIMEOUT_MULTIPLIER=$${CK_TIMEOUT_MULTIPLIER:-$(SAN_TIMEOUT_MULTIPLIER)} tests/run-unit.sh $(BUILD) $(TEST_BIN)

# The layers of src/ (core ... api, http) and the circles between its files, from its
# includes and from the symbols its object files define and use (tests/check_layers.py).
layers: $(BIN)
	@/usr/bin/python3 tests/check_layers.py $(BUILD)

# Adding an analysis edits no hand-written shared file: a scratch analysis' one file, added in a
# temporary copy, is built into the table and --dump-api (tests/api/analysis_files.sh; seconds).
analysis-files: $(BIN)
	@tests/api/analysis_files.sh $(BUILD)

# `make CFLAGS+=-Wshadow` and `make CFLAGS+=-Wconversion` (which in C includes -Wsign-conversion) build
# with 0 warnings: both are in the project's flags (ES_CFLAGS), so the normal and the ASan+UBSan builds
# check every file of src/ and tests/ (make test's build stages); this target passes the C files that
# make test builds with other flags or not at all (the fuzz targets: clang's; bench/) through the
# compiler's front end with both, as errors (-fsyntax-only: no objects, a few seconds), one line per
# file that warns.
WARN_SRC := $(FUZZ_SRC) $(wildcard bench/*.c)
warnings: $(ANALYSES_LIST)
	@mkdir -p $(BUILD)
	@printf '%s\n' $(WARN_SRC) | xargs -P$(or $(JOBS),2) -I{} sh -c \
	    '$(COMPILE) -Itests -I$(BUILD)/gen $(WARN_FLAGS) -fsyntax-only {} 2>&1 >/dev/null || echo "warns: {}"' >$(BUILD)/warnings.log; \
	 cat $(BUILD)/warnings.log; bad=$$(grep -c '^warns: ' $(BUILD)/warnings.log); \
	 echo "warnings ($(WARN_FLAGS)): $$(($(words $(WARN_SRC)) - bad)) passed, $$bad failed"; [ $$bad -eq 0 ]

# `make check` is the conventional name of `make test`; `make san-tests` runs the
# unit tests in the ASan+UBSan build only.
check: test

san-tests:
	@$(MAKE) --no-print-directory SAN=1 unit-tests

# make test runs each HTTP module once: against the ASan+UBSan daemon, except the modules of
# HTTP_NORMAL_ONLY, which run against the normal daemon. Both builds are -O2 from the same sources, so
# what the normal daemon adds to a module the sanitizers run is the uninstrumented timing and memory
# layout, which the browser tests, the soak and the modules below exercise; each module run twice
# cost about 170 CPU s (a 2-core machine's make test: 1187 CPU s, the HTTP stages 563 of them).
# HTTP_NORMAL_ONLY: the modules whose time is the size of their computation, spent in OpenBLAS and
# LAPACK (not instrumented), while the C paths they take run under the sanitizers in other modules at
# small sizes: test_realsize (GPT-2-size uploads and analyses; uploads, every analysis and the pair
# routes in test_uploads, test_table, test_api) and test_single_flight (two daemons decomposing
# 768-column matrices once between them; the cache_dir locks, waited for and taken over from a dead
# holder, in the unit test test_persist); the modules that check numbers against numpy (test_golden,
# test_exact, test_neighbors: their arithmetic is BLAS/LAPACK's, their C paths those of tests/analysis,
# run in the ASan+UBSan unit tests, and of every analysis route with every parameter in test_table);
# the modules about a consumer of the same routes, which should see the daemon that ships (test_client:
# the Python client; test_readme: the documents' examples; test_docs, test_dashboard,
# test_dashboard_defaults: the pages; test_openapi_generated: openapi.yaml against --dump-api), whose
# requests are the ones test_api, test_errors and test_table make under the sanitizers; test_positional
# (the positional analyses of GPT-2's 1024 x 768 wpe: FFTs and BLAS; their C paths in the unit tests
# tests/analysis/test_cosine and test_golden_positional, their parameters in test_table) and
# test_formats.FullResolution (1024 x 1024 cosines against numpy); test_proxy (nginx in front of the
# daemon that ships: its cache, refusals and upstream fail-over are nginx's configuration; the
# forwarded-address parser has its fuzzer, fuzz_forwarded); and the thread policies, OpenBLAS's and the
# cores' (test_blas.Threads, test_lifecycle.Threads: counts that only differ with the machine); and
# test_lifecycle.PrintfHooks, whose LD_PRELOAD shim cannot come before the ASan runtime (it skips itself
# there, so under the sanitizers alone it never ran). The
# ASan+UBSan run has the chaos of test_shared_uploads with half its operations (150). A MODULE.CLASS
# entry names one class of a module (tests/http/runner.py). `make http-tests` alone runs every module
# against the normal daemon, `make SAN=1 http-tests` all but these against the ASan+UBSan one, and
# HTTP_TESTS_FULL=1 (make test-full) runs every module in full against both.
HTTP_NORMAL_ONLY := test_realsize.py test_single_flight.py test_golden.py test_exact.py test_neighbors.py \
                 test_client.py test_readme.py test_docs.py test_dashboard.py \
                 test_dashboard_defaults.py test_openapi_generated.py test_positional.py test_proxy.py \
                 test_formats.FullResolution test_blas.Threads test_lifecycle.Threads test_lifecycle.PrintfHooks
HTTP_SAN_SHORT := EMBEDSCOPE_CHAOS_OPS=150
HTTP_TESTS_FULL ?= 0
# HTTP_SPLIT=1 (tests/run-all.sh): the normal daemon's share of make test, HTTP_NORMAL_ONLY alone
HTTP_SPLIT ?= 0
HTTP_SHORT_ENV := $(if $(filter 1,$(HTTP_TESTS_FULL)),,$(if $(filter 1,$(SAN)),HTTP_TESTS_SKIP="$(HTTP_NORMAL_ONLY)" \
                  $(HTTP_SAN_SHORT),$(if $(filter 1,$(HTTP_SPLIT)),HTTP_TESTS="$(HTTP_NORMAL_ONLY)")))
http-tests: $(BIN)
	@$(HTTP_SHORT_ENV) tests/http/run.sh $(BIN)

# openapi.yaml is generated and committed (the daemon serves it): the analysis routes'
# parameters and responses from the daemon's own description (--dump-api), the prose and
# the service routes from openapi.base.yaml (tools/gen_openapi.py). Run it after changing
# either; tests/http/test_openapi_generated.py fails on any difference.
openapi: $(BIN)
	$(BIN) --dump-api >$(BUILD)/api.json
	python3 tools/gen_openapi.py $(BUILD)/api.json openapi.base.yaml >$(BUILD)/openapi.yaml
	cp $(BUILD)/openapi.yaml openapi.yaml
	@$(MAKE) --no-print-directory $(BIN)

# The job tests on the issue's 16384 x 2048 Gaussian (make test runs them on 16384 x 768): minutes of
# CPU on a 2-core machine, mostly the generator's one-thread QRs; prints the daemon's CPU seconds. Then
# the kept replies' budget at the issue's size: 3 clients x 16 jobs of 2048 x 2048 grids, 32 MiB each
# (make test runs a quarter of the side); prints the daemon's peak RSS.
jobs-real: $(BIN)
	@cd tests/http && EMBEDSCOPE_BIN=$(CURDIR)/$(BIN) EMBEDSCOPE_JOBS_SHAPE=16384x2048 \
	    EMBEDSCOPE_JOB_BUDGET_SIDE=2048 /usr/bin/python3 -m unittest -v test_jobs test_job_budget

# The dashboard in a real browser (Debian's chromium driven by playwright-core), directly and
# behind nginx under a path prefix; screenshots of every panel in $(BUILD)/browser.
browser-deps:
	@scripts/install-deps.sh chromium

browser-tests: $(BIN)
	@tests/browser/run.sh $(BIN) $(CURDIR)/$(BUILD)/browser

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(COMPILE) -o $@ $< $(LIB) $(ES_LDFLAGS) $(LDFLAGS) $(PKG_LIBS)

# Bounded soak: three wrk runs of SOAK_SECONDS x SOAK_CONNECTIONS against 127.0.0.1;
# 0 errors, RSS growth < 5 % (scripts/soak.sh). `make test` runs a short one (3 s x 64).
.PHONY: soak soak-deps
soak-deps:
	@scripts/install-deps.sh wrk

soak: deps soak-deps $(BIN)
	@scripts/soak.sh $(BIN)

# Benchmarks (never timed tests): embedscope against numpy, sklearn, scipy and raw LAPACKE on the same
# matrices, then wrk against nginx serving the same reply, then the start-up time of config/gpt2-full.json
# without, with an empty and with a warm cache_dir; report in bench/results/report.md.
BENCH_DEB_PKGS := python3-sklearn python3-scipy wrk nginx time
bench: deps $(BUILD)/bench/bench_svd $(BIN)
	@scripts/install-deps.sh $(BENCH_DEB_PKGS)
	@bench/run.sh $(BUILD)
	@bench/http.sh $(BUILD)
	@/usr/bin/python3 bench/ready.py $(BUILD)
	@/usr/bin/python3 bench/cost.py $(BUILD)

# The cost model alone: predicted against measured seconds for every analysis over a grid of sizes.
bench-cost: $(BIN)
	@/usr/bin/python3 bench/cost.py $(BUILD)

# cosine?mode=offset: the daemon over HTTP against numpy's FFT of the same computation at 50257 x 768,
# interleaved rounds, wall and CPU (bench/cosine_offset.py), then the FFT against the direct sums over
# every pair on one generated matrix, their largest difference and stated bounds (bench/bench_offsets.c;
# the direct sums take minutes). Results by hand in bench/results/.
bench-offsets: $(BIN) $(BUILD)/bench/bench_offsets
	@/usr/bin/python3 bench/cosine_offset.py $(BUILD)
	@$(BUILD)/bench/bench_offsets 50257 768

# Another client's light requests while one client floods the compute pool (bench/fairness.py: p50/p99
# of uncached neighbors?k=2, quiet and under 16 connections of periodicity and exact PCAs), 3 rounds;
# appends to bench/results/fairness.jsonl.
bench-fairness: $(BIN)
	@/usr/bin/python3 bench/fairness.py $(BUILD)

# A Llama-3-8B-sized token embedding (128256 x 4096) on the embedded default: PUT, top-30 PCA and the
# spectrum as jobs with their progress, timed (bench/llama.py; LLAMA_SOURCE=npy uploads a float32 file
# instead of the one-thread gaussian generator, LLAMA_SPECTRUM=0 skips the spectrum). Minutes of CPU, ~8 GB.
bench-llama: $(BIN)
	@/usr/bin/python3 bench/llama.py $(BUILD)

# UMAP against umap-learn (Debian's umap-learn) on a 50257 x 768 matrix of 20 planted clusters: time and
# trustworthiness of both, 2 rounds (umap-learn first compiling, then compiled; UMAP_ROUNDS), each ending in
# a summary of the ratios (bench/umap_learn_compare.py; UMAP_SHAPE=8192x768 for a quick run). Minutes of CPU.
bench-umap: $(BIN)
	@scripts/install-deps.sh umap-learn python3-sklearn
	@/usr/bin/python3 bench/umap_learn_compare.py $(BUILD)

# The dashboard at 50257 and 200000 rows in headless Chromium against the real daemon: the first points
# after the PCA data, a clicked point's panels, main-thread time (bench/explorer.sh, bench/explorer.mjs;
# appends to bench/results/explorer.jsonl). Minutes: the 200000 x 768 decomposition comes first.
bench-explorer: $(BIN) dashboard
	@bench/explorer.sh $(BIN)

# Regenerate every numpy golden (the positional one reads ../shared/data too).
# The container image and the Kubernetes manifests under podman (scripts/container.sh
# installs podman, runc and debootstrap when missing and builds the base image once).
.PHONY: image k8s-test
image: deps
	scripts/container.sh image

k8s-test: deps
	@tests/deploy/k8s.sh

# `make install [PREFIX=/usr/local] [DESTDIR=]`: the binary (its embedded default reads
# PREFIX/share/embedscope/data, never the checkout), the man page generated from --help,
# the default configuration and the weights it needs, an example configuration for the
# service in SYSCONFDIR/embedscope/ (kept when one is there), and the hardened systemd unit.
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
STATEDIR := /var/lib/embedscope
SHARE := $(DATADIR)/embedscope
INSTALL_DIR := $(BUILD)/install
INSTALL_BIN := $(INSTALL_DIR)/embedscope
.PHONY: install uninstall install-test

$(INSTALL_DIR)/share.stamp: FORCE
	@mkdir -p $(INSTALL_DIR)
	@echo '$(SHARE)' | cmp -s - $@ || echo '$(SHARE)' >$@

$(INSTALL_DIR)/config.o: src/app/config.c $(INSTALL_DIR)/share.stamp
	$(COMPILE) -DES_DEFAULT_CONFIG_DIR='"$(SHARE)/config"' -MMD -MP -c $< -o $@

$(INSTALL_BIN): $(HTTP_OBJ) $(filter-out $(BUILD)/src/app/config.o,$(LIB_OBJ)) $(INSTALL_DIR)/config.o
	$(CC) $(ES_LDFLAGS) $(LDFLAGS) -o $@ $^ $(PKG_LIBS)

# The service's configuration: the default one with absolute paths, the decomposition
# cache and the uploads kept in the unit's StateDirectory.
$(INSTALL_DIR)/embedscope.json: config/embedscope.json $(INSTALL_DIR)/share.stamp
	sed -e 's#"data_dir": "../data"#"data_dir": "$(SHARE)/data"#' \
	    -e '0,/"server": {/s##"uploads": {"dir": "$(STATEDIR)/uploads"},\n  "server": {\n    "cache_dir": "$(STATEDIR)/cache",#' $< >$@
	grep -q '"data_dir": "$(SHARE)/data"' $@ && grep -q '"cache_dir": "$(STATEDIR)/cache"' $@

install: $(INSTALL_BIN) $(INSTALL_DIR)/embedscope.json
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SHARE)/config $(DESTDIR)$(UNITDIR) \
	    $(DESTDIR)$(SYSCONFDIR)/embedscope
	install -m 755 $(INSTALL_BIN) $(DESTDIR)$(BINDIR)/embedscope
	install -m 644 config/embedscope.json $(DESTDIR)$(SHARE)/config/
	cp -R data $(DESTDIR)$(SHARE)/ && chmod -R u=rwX,go=rX $(DESTDIR)$(SHARE)/data
	scripts/manpage.sh $(INSTALL_BIN) $(SYSCONFDIR) >$(DESTDIR)$(MANDIR)/man8/embedscope.8
	sed -e 's#@BINDIR@#$(BINDIR)#g' -e 's#@SYSCONFDIR@#$(SYSCONFDIR)#g' deploy/systemd/embedscope.service.in \
	    >$(DESTDIR)$(UNITDIR)/embedscope.service
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/embedscope/embedscope.json ]; then \
	    echo "kept $(DESTDIR)$(SYSCONFDIR)/embedscope/embedscope.json (the new default: $(SHARE)/config/service.json)"; \
	else install -m 644 $(INSTALL_DIR)/embedscope.json $(DESTDIR)$(SYSCONFDIR)/embedscope/embedscope.json; fi
	install -m 644 $(INSTALL_DIR)/embedscope.json $(DESTDIR)$(SHARE)/config/service.json

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/embedscope $(DESTDIR)$(MANDIR)/man8/embedscope.8 $(DESTDIR)$(UNITDIR)/embedscope.service
	rm -rf $(DESTDIR)$(SHARE)
	@echo "kept $(DESTDIR)$(SYSCONFDIR)/embedscope/ and $(STATEDIR) (configuration and state)"

# A test install into a temporary DESTDIR and PREFIX, systemd-analyze verify of the unit,
# the installed binary run from elsewhere (tests/deploy/install.sh).
install-test: $(BIN)
	@tests/deploy/install.sh

golden:
	/usr/bin/python3 tests/golden/make_golden.py
	/usr/bin/python3 tests/golden/make_golden_positional.py
	/usr/bin/python3 tests/golden/make_golden_neighbors.py
	/usr/bin/python3 tests/golden/make_golden_analyses.py

clean:
	rm -rf $(BUILD) $(BUILD)-san $(BUILD)-fuzz* build build-san build-fuzz* $(WEB_DIR)

-include $(shell find $(BUILD) -name "*.d" 2>/dev/null)

# Fuzzers, one per parser (libFuzzer + ASan + UBSan, clang-14): `make fuzz [FUZZ_SECONDS=30]`
# builds every tests/fuzz/fuzz_NAME.c into $(BUILD)-fuzz, linked against an instrumented
# archive of the library and the HTTP layer (the linker takes only the objects a target
# uses), writes the seed corpora $(BUILD)-fuzz/corpus/NAME and dictionaries NAME.dict
# (tests/fuzz/make_corpus.py) and runs each target for FUZZ_SECONDS, as many at once as there
# are cores (tests/fuzz/run.sh; JOBS). Allocations above
# the limits and slow inputs are findings too. Crashing inputs go to
# $(BUILD)-fuzz/artifacts/; every target runs, the last line is "fuzz: N passed, N failed"
# (one per target), then make fails if any found something. `make test` runs FUZZ_SECONDS=1 of a build at
# FUZZ_OPT=-O0, in its own $(BUILD)-fuzz-O0: its compile is 31 CPU s against -O1's 69 (measured quiet, 2 cores),
# and a 1 s run is bounded by time, not by speed (the same CPU; the corpora replayed whole, 4k-520k runs a
# target against 4k-520k at -O1); the long run keeps -O1, where a target's speed is what finds things.
FUZZ_DEB_PKGS := clang-14 libclang-rt-14-dev lld-14
FUZZ_SECONDS ?= 30
FUZZ_OPT ?= -O1
FUZZ_DIR := $(BUILD)-fuzz$(filter-out -O1,$(FUZZ_OPT))
FUZZ_CC := clang-14
FUZZ_CFLAGS := -std=c11 -g $(FUZZ_OPT) -D_GNU_SOURCE -Iinclude -Isrc -fsanitize=address,undefined \
               -fno-sanitize-recover=undefined
FUZZ_RUN_FLAGS := -max_len=4096 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1
# The library and, of the transport, the framing check (fuzz_framing): the rest of src/http is the glue to
# libmicrohttpd, sockets and the command line, which no target calls (measured from the linker's maps: the
# twelve targets link 93 of the 100 objects between them, and none of conns, listen, printf_hooks, probe, server).
FUZZ_LIB_SRC := $(LIB_SRC) src/http/framing.c
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o) $(LIB_CXX_SRC:%.cc=$(FUZZ_DIR)/obj/%.o) \
                $(FUZZ_DIR)/obj/src/core/embedded.o $(FUZZ_DIR)/obj/web/assets.o
# The C++ file (shortest.cc) with clang's C++ driver and the same sanitizers, no exceptions or RTTI (so no
# C++ runtime is needed at the link, as in the normal build).
FUZZ_CXX := clang++-14
FUZZ_CXXFLAGS := -std=c++17 -g $(FUZZ_OPT) -DNDEBUG -fno-exceptions -fno-rtti -fsanitize=address,undefined \
                 -fno-sanitize-recover=undefined $(addprefix -I,$(firstword $(wildcard /usr/include/dragonbox-*/)))
FUZZ_LIB := $(FUZZ_DIR)/libembedscope-fuzz.a
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_DIR)/%)

.PHONY: fuzz-deps fuzz-build
fuzz-deps:
	@scripts/install-deps.sh $(RUN_DEB_PKGS) $(FUZZ_DEB_PKGS)

$(FUZZ_DIR)/obj/%.o: %.c | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(PKG_CFLAGS) -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/src/api/analyses.o: $(ANALYSES_LIST)
$(FUZZ_DIR)/obj/src/api/analyses.o: FUZZ_CFLAGS += -I$(BUILD)/gen

$(FUZZ_DIR)/obj/%.o: %.cc | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_DIR)/obj/src/core/embedded.o: src/core/embedded.S config/embedscope.json openapi.yaml | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -I. -c $< -o $@

$(FUZZ_DIR)/obj/web/assets.o: $(WEB_ASM) $(BUILD)/web.stamp | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -I. -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# Linked by LLVM's lld where installed (lld-14, FUZZ_DEB_PKGS): 0.25 CPU s a target against 0.9 with the default
# linker (fuzz_upload, measured at load 25), and gold warns about every ASan check symbol of clang's runtime.
FUZZ_LD := $(if $(shell command -v ld.lld-14 2>/dev/null),-fuse-ld=lld-14)
$(FUZZ_DIR)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(PKG_CFLAGS) $(FUZZ_LD) -o $@ $< $(FUZZ_LIB) $(PKG_LIBS)

# The targets alone (make test times their build apart from their run).
fuzz-build: $(FUZZ_BIN)

fuzz: $(FUZZ_BIN)
	/usr/bin/python3 tests/fuzz/make_corpus.py $(FUZZ_DIR)/corpus
	@tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) "$(FUZZ_RUN_FLAGS)" $(FUZZ_BIN)

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)
