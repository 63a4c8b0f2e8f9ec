/* embedscope: the daemon. Loads the configured matrices, starts serving at
 * once, warms the configured decompositions in the background (/readyz turns
 * 200 when done), reloads its configuration on SIGHUP (es_app_reload: a
 * broken one is logged and the running one kept) and shuts down cleanly on
 * SIGINT/SIGTERM. Under systemd (Type=notify) it tells the service manager
 * READY=1 once /readyz answers 200, RELOADING=1 then READY=1 around a SIGHUP
 * reload, and STOPPING=1 at shutdown (sd_notify: nothing without $NOTIFY_SOCKET).
 *
 * Exit codes: 0 after a clean shutdown or --help / --version / --dump-api / --dump-config / --check-config success,
 * or a 2xx answer to --probe; 1 for errors at start (configuration, files, listen address, warming),
 * or a --probe that got no 2xx; 2 for a bad command line. */
#include "embedscope/blas.h"
#include "embedscope/config.h"
#include "embedscope/app.h"
#include "embedscope/cost.h"
#include "embedscope/pool.h"
#include "embedscope/route.h"
#include "embedscope/uploads.h"
#include "embedscope/version.h"
#include "http/transport.h"

#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <printf.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>

static const char usage[] =
    "usage: embedscope [--config FILE] [--listen HOST:PORT] [--threads N]\n"
    "                  [--compute-threads N] [--queue-limit N]\n"
    "                  [--log-level debug|info|warn|error] [--log-format text|json]\n"
    "                  [--access-log on|off] [--cost-rates calibrate|fixed]\n"
    "                  [--blas-threads auto|N]\n"
    "                  [--check-config] [--dump-config] [--dump-api] [--version]\n"
    "                  [--probe PATH] [--help]\n"
    "\n"
    "Serves PCA, spectra, cosine similarities, subspace capture and singular-vector\n"
    "overlaps of transformer matrices over HTTP (API: GET /openapi.yaml).\n"
    "\n"
    "  --config FILE     configuration (JSON); default: the embedded default config\n"
    "  --listen H:P      listen address, overrides server.listen (\"[::1]:8080\" for IPv6;\n"
    "                    port 0 picks a free port, logged at start)\n"
    "  --threads N       HTTP threads, overrides server.threads (default: one per\n"
    "                    core the process may use); they parse, validate and answer everything\n"
    "                    cheap, never a computation\n"
    "  --compute-threads N\n"
    "                    threads running analyses and decompositions (default: the\n"
    "                    cores, or cores / server.blas_threads when that is a number)\n"
    "  --blas-threads auto|N\n"
    "                    OpenBLAS threads per computation, overrides server.blas_threads\n"
    "                    (see below)\n"
    "  --queue-limit N   computations that may wait for a compute thread (default %d);\n"
    "                    beyond it requests get 503 with Retry-After\n"
    "  --log-level L     debug, info (default), warn or error; logs go to stderr\n"
    "  --log-format F    text (default) or json: one JSON object per line\n"
    "  --access-log on|off\n"
    "                    one line per request (default on), whatever --log-level says\n"
    "  --cost-rates calibrate|fixed\n"
    "                    the cost model's rates: measured at start (calibrate, the\n"
    "                    default) or the built-in ones, the same on every machine\n"
    "                    (fixed: for tests; predictions no longer fit this machine)\n"
    "  --check-config    load the configuration and its files, report, exit\n"
    "  --dump-config     load the configuration, print its server, limits and uploads\n"
    "                    settings as loaded (every default filled in) as JSON, exit\n"
    "  --dump-api        print the API (routes, parameters with their types, defaults\n"
    "                    and limits, tables, statuses, problem types) as JSON, exit;\n"
    "                    openapi.yaml is generated from it (make openapi)\n"
    "  --version         print the version and the git commit of this build, exit\n"
    "  --probe PATH      GET PATH (e.g. /readyz) from the daemon at --listen (default\n"
    "                    127.0.0.1:8080; 0.0.0.0 and :: mean the loopback), exit 0 on a\n"
    "                    2xx answer within 2 s, else 1: the container's health check\n"
    "\n"
    "OpenBLAS threads: server.blas_threads \"auto\" (the default) gives the computations\n"
    "running at once an equal share of the cores this process may use (its CPU\n"
    "affinity, bounded by its cgroup CPU quota); a number N gives each computation N,\n"
    "reduced so that compute threads x N never exceed those cores. At start the\n"
    "OpenBLAS kernels are checked and, when the library picked generic ones on a CPU\n"
    "with AVX2 or AVX-512, the daemon restarts itself once with OPENBLAS_CORETYPE set\n"
    "(never when the user set it).\n"
    "\n"
    "Environment:\n"
    "  EMBEDSCOPE_DATA_DIR\n"
    "                    the embedded default's data directory (its data_dir), when set\n"
    "                    and not empty\n"
    "  EMBEDSCOPE_UPLOAD_TOKEN\n"
    "                    the bearer token writes need when uploads.token is \"\"\n"
    "  TMPDIR            where upload bodies are streamed when uploads.tmp_dir is \"\"\n"
    "                    (else /tmp)\n"
    "  OPENBLAS_CORETYPE\n"
    "                    OpenBLAS's kernels; when unset the daemon may set it and\n"
    "                    restart once (see above)\n"
    "  OPENBLAS_NUM_THREADS\n"
    "                    the size of OpenBLAS's first thread pool only: the daemon sets\n"
    "                    the threads each computation uses (server.blas_threads)\n"
    "  NOTIFY_SOCKET     systemd's notification socket (Type=notify): READY=1 once\n"
    "                    /readyz answers 200, RELOADING=1 and READY=1 around SIGHUP,\n"
    "                    STOPPING=1 at shutdown\n"
    "\n"
    "Exit status:\n"
    "  0                 a clean shutdown after SIGTERM or SIGINT; --help, --version,\n"
    "                    --dump-api, --dump-config, a valid --check-config; a 2xx\n"
    "                    answer to --probe\n"
    "  1                 a failure at start (configuration, files, listen address) or\n"
    "                    while warming; --probe without a 2xx answer\n"
    "  2                 a bad command line\n";

typedef struct options {
    const char *config;
    char host[256];
    unsigned port;
    bool listen_given;
    unsigned threads; /* 0: from the config */
    unsigned compute_threads; /* 0: cores / blas threads */
    int blas_threads; /* --blas-threads: -1 the configuration's, 0 auto, N */
    unsigned queue_limit;
    es_log_level level;
    bool json_log;
    bool no_access_log;
    bool fixed_rates; /* --cost-rates fixed */
    bool check_only;
    bool dump_config;
    const char *probe; /* --probe PATH */
} options;

/* Bad command line: message, usage hint, exit 2. */
static _Noreturn void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "embedscope: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'embedscope --help'.\n");
    exit(2);
}

/* --log-level name into *out; -1 if not debug, info, warn or error. */
static int parse_level(const char *s, es_log_level *out)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    int i = es_name_index(names, sizeof names / sizeof *names, s);
    if (i < 0)
        return -1;
    *out = (es_log_level)i;
    return 0;
}

/* The value of a numeric option in 1..max; exits 2 otherwise. */
static unsigned count_option(const char *name, const char *arg, unsigned max)
{
    if (!*arg || strspn(arg, "0123456789") != strlen(arg) || strlen(arg) > 6 || atol(arg) < 1 ||
        (unsigned long)atol(arg) > max) {
        char what[64];
        snprintf(what, sizeof what, "%s: expected an integer in 1..%u, got '%%s'", name, max);
        usage_error(what, arg);
    }
    return (unsigned)atol(arg);
}

/* --dump-api: the API described from its tables, on stdout. */
static void dump_api(void)
{
    json_t *api = es_api_describe();
    json_dumpf(api, stdout, JSON_INDENT(2));
    putchar('\n');
    json_decref(api);
}

/* Parse argv; exits 0 for --help and 2 for anything malformed. */
static void parse_options(int argc, char **argv, options *o)
{
    static const struct option longopts[] = {
        {"config", required_argument, NULL, 'c'},    {"listen", required_argument, NULL, 'l'},
        {"threads", required_argument, NULL, 't'},   {"log-level", required_argument, NULL, 'L'},
        {"check-config", no_argument, NULL, 'C'},    {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},        {"log-format", required_argument, NULL, 'F'},
        {"access-log", required_argument, NULL, 'A'},
        {"compute-threads", required_argument, NULL, 'p'}, {"queue-limit", required_argument, NULL, 'q'},
        {"dump-api", no_argument, NULL, 'D'},       {"probe", required_argument, NULL, 'P'},
        {"dump-config", no_argument, NULL, 'S'},     {"cost-rates", required_argument, NULL, 'R'},
        {"blas-threads", required_argument, NULL, 'B'},
        {NULL, 0, NULL, 0}};
    *o = (options){.level = ES_LOG_INFO, .queue_limit = ES_QUEUE_LIMIT_DEFAULT, .blas_threads = -1};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'c': o->config = optarg; break;
        case 'l':
            if (es_parse_listen(optarg, o->host, sizeof o->host, &o->port) < 0)
                usage_error("--listen: expected HOST:PORT (or [IPV6]:PORT), got '%s'", optarg);
            o->listen_given = true;
            break;
        case 't': o->threads = count_option("--threads", optarg, 1024); break;
        case 'p': o->compute_threads = count_option("--compute-threads", optarg, 1024); break;
        case 'q': o->queue_limit = count_option("--queue-limit", optarg, 100000); break;
        case 'B':
            if (strcmp(optarg, "auto") == 0)
                o->blas_threads = 0;
            else if (!*optarg || strspn(optarg, "0123456789") != strlen(optarg) || strlen(optarg) > 4 ||
                     atoi(optarg) < 1 || atoi(optarg) > 1024)
                usage_error("--blas-threads: expected auto or an integer in 1..1024, got '%s'", optarg);
            else
                o->blas_threads = atoi(optarg);
            break;
        case 'L':
            if (parse_level(optarg, &o->level) < 0)
                usage_error("--log-level: expected debug, info, warn or error, got '%s'", optarg);
            break;
        case 'F':
            if (strcmp(optarg, "text") != 0 && strcmp(optarg, "json") != 0)
                usage_error("--log-format: expected text or json, got '%s'", optarg);
            o->json_log = strcmp(optarg, "json") == 0;
            break;
        case 'A':
            if (strcmp(optarg, "on") != 0 && strcmp(optarg, "off") != 0)
                usage_error("--access-log: expected on or off, got '%s'", optarg);
            o->no_access_log = strcmp(optarg, "off") == 0;
            break;
        case 'R':
            if (strcmp(optarg, "calibrate") != 0 && strcmp(optarg, "fixed") != 0)
                usage_error("--cost-rates: expected calibrate or fixed, got '%s'", optarg);
            o->fixed_rates = strcmp(optarg, "fixed") == 0;
            break;
        case 'C': o->check_only = true; break;
        case 'S': o->dump_config = true; break;
        case 'P': o->probe = optarg; break;
        case 'h': printf(usage, ES_QUEUE_LIMIT_DEFAULT); exit(0);
        case 'D': dump_api(); exit(0);
        case 'V': printf("embedscope %s (commit %s)\n", ES_VERSION, es_build_commit); exit(0);
        case ':': usage_error("option %s needs a value", argv[optind - 1]);
        default: usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
}

/* Woken by SIGINT/SIGTERM/SIGHUP (handlers) or a failed warm-up (compute thread). */
static sem_t wake;
static volatile sig_atomic_t got_signal, got_hup;

/* SIGINT / SIGTERM: record the signal and wake serve(). */
static void on_signal(int sig)
{
    got_signal = sig;
    sem_post(&wake); /* async-signal-safe */
}

/* SIGHUP: never fatal; serve() calls reload() outside the handler. */
static void on_hup(int sig)
{
    (void)sig;
    got_hup = 1;
    sem_post(&wake);
}

/* systemd's readiness protocol (sd_notify(3), a no-op without $NOTIFY_SOCKET;
 * the unit is Type=notify). Only the main thread notifies. */
static bool notified_ready; /* READY=1 sent and no RELOADING=1 since */

/* READY=1 once the app is ready (/readyz answers 200), at most once a state:
 * the main loop calls it at every wake-up (STORE_POLL_NS at most after the
 * last warm decomposition). Never fails. */
static void notify_ready(es_app *app)
{
    if (notified_ready || !atomic_load(&app->ready))
        return;
    notified_ready = true;
    sd_notifyf(0, "READY=1\nSTATUS=ready: %zu decompositions warmed, serving", app->n_plans);
}

/* RELOADING=1 with the CLOCK_MONOTONIC time systemd asks of it (sd_notify(3)),
 * only once READY=1 was sent (before, systemd still waits for readiness). */
static void notify_reloading(void)
{
    if (!notified_ready)
        return;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    notified_ready = false;
    sd_notifyf(0, "RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=%llu",
               (unsigned long long)now.tv_sec * 1000000ULL + (unsigned long long)now.tv_nsec / 1000ULL);
}

/* What SIGHUP does, called from the main thread while serving: reload the
 * configuration (es_app_reload logs the outcome; a failure keeps the running
 * one, the daemon keeps serving either way), between RELOADING=1 and READY=1. */
static void reload(es_app *app)
{
    es_err err;
    es_info("SIGHUP received: reloading %s", app->config_path ? app->config_path : "the embedded default");
    notify_reloading();
    es_app_reload(app, &err);
    notify_ready(app);
}

/* A warm-up failed: wake serve(), which exits 1. */
static void on_warm_failure(void) { sem_post(&wake); }

/* Handlers (not sigwait) so the signal may land on any thread, including
 * OpenBLAS threads created before main() could block it. */
static void install_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    struct sigaction hup = {.sa_handler = on_hup};
    sigemptyset(&hup.sa_mask);
    sigaction(SIGHUP, &hup, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Print the one start-up error line and return exit code 1. */
static int startup_failure(const es_err *err)
{
    if (err->param[0] && !strstr(err->message, err->param))
        es_error("%s (at %s)", err->message, err->param);
    else
        es_error("%s", err->message);
    return 1;
}

/* HTTP threads: --threads, else server.threads, else one per core the process
 * may use (its affinity and cgroup CPU quota, es_cores_available), as nginx's
 * "worker_processes auto": fewer leave cores idle while replies queue (16
 * cores, 2 threads: 0.14x nginx's requests/s), more only queue ready
 * connections behind the scheduler's time slice (one core, 64 connections: p99
 * 5 ms with 2 threads, 1.9 ms with 1). Never fails. */
static unsigned http_threads(unsigned given, unsigned configured)
{
    if (given)
        return given;
    if (configured)
        return configured;
    unsigned cores = es_cores_available();
    return cores < 1 ? 1 : cores > 1024 ? 1024 : cores;
}

/* Compute threads and the BLAS thread policy. blas_threads 0 ("auto"): as many
 * compute threads as cores (--compute-threads, at most the cores, overrides),
 * and OpenBLAS's threads are the cores divided among the computations running
 * at once (es_blas_threads_auto). blas_threads N: N threads per computation and
 * cores / N compute threads by default; with --compute-threads given, N is
 * reduced so that their product never exceeds the cores. *blas gets the
 * threads per computation (0 for auto). Never fails. */
static void size_compute(unsigned given, unsigned *compute, unsigned *blas)
{
    unsigned cores = es_cores_available();
    unsigned b = *blas == 0 ? 1 : *blas > cores ? cores : *blas;
    unsigned c = given ? given : cores / b; /* >= 1 since b <= cores */
    if (c > cores) {
        es_warn("--compute-threads %u: only %u cores, using %u compute threads", c, cores, cores);
        c = cores;
    }
    *compute = c;
    if (*blas == 0) {
        es_blas_threads_auto(cores);
        return;
    }
    *blas = b < cores / c ? b : cores / c;
    es_blas_threads_fixed(*blas);
}

/* The --config file, else the default configuration; fails like es_config_load_*. */
static int load_catalogue(const options *o, es_catalogue **reg, es_err *err)
{
    double t0 = es_now();
    int rc = o->config ? es_config_load_file(o->config, reg, err) : es_config_load_default(reg, err);
    if (rc == 0)
        es_info("configuration %s loaded in %.3f s", (*reg)->origin, es_now() - t0);
    return rc;
}

/* How often the main loop looks whether another daemon changed uploads.dir. */
#define STORE_POLL_NS 250000000L

/* Wait for a signal's wake-up, or STORE_POLL_NS. -1 on an unexpected error. */
static int wait_wake(void)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += STORE_POLL_NS;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    if (sem_timedwait(&wake, &until) < 0 && errno != EINTR && errno != ETIMEDOUT)
        return -1;
    return 0;
}

/* Serve until a signal (exit 0) or a failed warm-up (exit 1). */
static int serve(es_app *app, const options *o)
{
    const char *host = o->listen_given ? o->host : app->server.host;
    unsigned port = o->listen_given ? o->port : app->server.port;
    es_server *srv;
    es_err err;
    if (es_server_start(app, host, port, &srv, &err) < 0)
        return startup_failure(&err);
    es_pool_stats ps;
    es_pool_get_stats(app->pool, &ps);
    char blas[48];
    if (app->server.blas_threads)
        snprintf(blas, sizeof blas, "%u", app->server.blas_threads);
    else
        snprintf(blas, sizeof blas, "auto (%u cores shared)", es_cores_available());
    es_info("listening on http://%s%s%s:%u (http threads %u, compute threads %zu x blas threads %s, queue limit "
            "%zu, cache %zu MiB + responses %zu MiB)",
            strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "", es_server_port(srv),
            app->server.threads, ps.threads, blas, ps.queue_max, app->server.cache_bytes >> 20,
            (app->server.cache_bytes / ES_RESULTS_BUDGET_DIVISOR) >> 20);
    sd_notifyf(0, "STATUS=warming %zu decompositions", app->n_plans);
    es_app_start_warming(app, on_warm_failure);
    while (!got_signal && !atomic_load(&app->warm_failed)) {
        notify_ready(app);
        if (wait_wake() < 0)
            break;
        if (got_hup) {
            got_hup = 0;
            reload(app);
        }
        es_persist_poll(app); /* other daemons' changes to uploads.dir */
    }
    bool failed = atomic_load(&app->warm_failed) && !got_signal;
    es_catalogue *cat = es_app_catalogue(app); /* the grace period as configured now (a reload may change it) */
    unsigned grace = cat->server.shutdown_grace_s;
    es_catalogue_free(cat);
    es_info("shutting down (%s), grace period %u s", failed ? "warming failed" : strsignal(got_signal), grace);
    sd_notifyf(0, "STOPPING=1\nSTATUS=shutting down (%s)", failed ? "warming failed" : strsignal(got_signal));
    atomic_store(&app->stopping, true);
    if (!es_server_stop(srv, grace)) {
        /* a computation is still inside LAPACK: it cannot be interrupted, and
         * nothing it uses may be freed; its client was answered 503 */
        es_info("stopped (computations abandoned)");
        fflush(NULL);
        _exit(failed ? 1 : 0);
    }
    return failed ? 1 : 0;
}

/* printf_hooks.c refuses every printf extension so that glibc keeps its fast
 * path; that holds only while the executable's definitions come first in
 * symbol lookup for the libraries' constructors (libquadmath's). Checked as
 * tests/http/test_printf_hooks.c does: with libquadmath's hooks "%Qf" is a
 * directive that takes an argument. Speed only, so a loud warning, not a refusal. */
static void check_printf_hooks(void)
{
    int types[2] = {-1, -1};
    if (parse_printf_format("%Qf", 2, types) != 0)
        es_warn("a printf extension is registered (libquadmath's %%Q): the refusal of src/http/printf_hooks.c is "
                "not in effect, so every snprintf of the daemon takes about twice as long");
}

/* Exit 0 after a signal, --check-config or --help; 1 on a start-up or warm-up failure;
 * 2 on a bad command line. */
int main(int argc, char **argv)
{
    options o;
    parse_options(argc, argv, &o);
    if (o.probe && !o.listen_given && es_parse_listen(ES_LISTEN_DEFAULT, o.host, sizeof o.host, &o.port) < 0)
        abort(); /* the default is well formed */
    if (o.probe)
        return es_probe(o.host, o.port, o.probe);
    es_log_set_level(o.level);
    es_log_set_json(o.json_log);
    es_info("embedscope %s (commit %s)", ES_VERSION, es_build_commit);
    es_blas_startup(argv); /* may restart the process with better BLAS kernels */
    check_printf_hooks();
    sem_init(&wake, 0, 0);
    install_signals();

    /* Generated matrices (e.g. the seeded Gaussian) go through BLAS/LAPACK, whose
     * rounding depends on the thread count: load with one thread so their bytes,
     * sha256 and hence ETags do not depend on the machine. */
    openblas_set_num_threads(1);
    es_catalogue *reg;
    es_err err;
    es_digests_hold(!o.fixed_rates); /* the files' sha256s after the calibration, not beside it */
    if (load_catalogue(&o, &reg, &err) < 0)
        return startup_failure(&err);
    if (o.dump_config) {
        json_t *settings = es_settings_json(&reg->server, &reg->limits, &reg->uploads);
        json_dumpf(settings, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(settings);
        es_catalogue_free(reg);
        return 0;
    }
    es_app app;
    if (es_app_init(&app, reg, &err) < 0)
        return startup_failure(&err);
    app.config_path = o.config;
    app.loopback = es_host_is_loopback(o.listen_given ? o.host : app.server.host);
    app.env_token = getenv("EMBEDSCOPE_UPLOAD_TOKEN");
    if (o.check_only) {
        size_t n_matrices = 0;
        for (size_t i = 0; i < app.reg->n_models; i++)
            n_matrices += app.reg->models[i].n_matrices;
        printf("configuration %s is valid: %zu models, %zu matrices, %zu decompositions to warm\n", app.reg->origin,
               app.reg->n_models, n_matrices, app.n_plans);
        es_app_free(&app);
        return 0;
    }
    if (es_persist_restore(&app, &err) < 0) {
        es_app_free(&app);
        return startup_failure(&err);
    }
    es_upload_sweep_tmp(&app.reg->uploads);
    app.server.threads = http_threads(o.threads, app.server.threads);
    app.access_log = !o.no_access_log;
    if (o.blas_threads >= 0)
        app.server.blas_threads = (unsigned)o.blas_threads;
    unsigned compute;
    size_compute(o.compute_threads, &compute, &app.server.blas_threads);
    if (o.fixed_rates) {
        es_cost_fix_rates(); /* the same predictions on every machine: nothing measured, nothing refreshed */
    } else {
        es_cost_calibrate(); /* one computation's rates, with the BLAS threads it gets alone */
        es_cache_set_observer(app.cache, es_cost_observe); /* and refreshed from each decomposition computed */
    }
    es_digests_hold(false);
    if (es_app_start_compute(&app, compute, o.queue_limit, &err) < 0) {
        es_app_free(&app);
        return startup_failure(&err);
    }

    int rc = serve(&app, &o);
    es_digests_stop(); /* files' sha256s still computed: stopped within a read */
    es_app_free(&app);
    sem_destroy(&wake);
    if (rc == 0)
        es_info("stopped");
    return rc;
}
