/* Shared main() for Check test programs: ES_CHECK_MAIN(make_suite) runs the suite
 * and exits non-zero when any test failed. Data paths: ES_SHARED_DATA is
 * ../shared/data relative to the repository root (tests run from the root).
 * A test that cannot run (its data is absent) calls ES_SKIP and returns:
 * tests/run-unit.sh counts every "skip:" line as skipped, not passed. */
#ifndef ES_CHECK_MAIN_H
#define ES_CHECK_MAIN_H
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A passing assertion only notes where it was. Check's own ck_assert_msg makes every passing
 * assertion a mark point, which in fork mode writes and flushes a message to the parent: one
 * write(2) per assertion, and an element-wise comparison of a 1024 x 768 matrix is 786,432 of
 * them (tests/store/test_source 2.8 -> 0.07 CPU s, test_dtoa 5.0 -> 0.8, test_svd 16.5 -> 14.7 and
 * 336 -> 58 s of wall at load 25). The place of the last passing assertion is sent as the mark
 * point only when the test dies of a signal (es_ck_fatal), so a crash is still reported "after"
 * it; a failing assertion fails as before. */
static const char *es_ck_file __attribute__((unused));
static int es_ck_line __attribute__((unused));
#undef ck_assert_msg
#define ck_assert_msg(expr, ...)                                                                          \
    ((expr) ? (void)(es_ck_file = __FILE__, es_ck_line = __LINE__)                                       \
            : _ck_assert_failed(__FILE__, __LINE__, "Assertion '" #expr "' failed", ##__VA_ARGS__))

#define ES_CK_FATAL_SIGNALS {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}
static struct sigaction es_ck_previous[NSIG] __attribute__((unused));

/* A forked test dying of sig: its last passing assertion becomes the mark point Check reports,
 * then the handler there before (the sanitizers' report, or the default) takes the signal. */
static inline void es_ck_fatal(int sig)
{
    if (es_ck_line)
        _mark_point(es_ck_file, es_ck_line);
    sigaction(sig, &es_ck_previous[sig], NULL);
    raise(sig);
}

/* Installed before the suite runs: the forked tests inherit it. */
static inline void es_ck_catch_fatal(void)
{
    static const int sigs[] = ES_CK_FATAL_SIGNALS;
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction sa = {.sa_handler = es_ck_fatal, .sa_flags = SA_ONSTACK};
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, &es_ck_previous[sigs[i]]);
    }
}

#define ES_SHARED_DATA "../shared/data"
#define ES_REPO_DATA "data"

static inline int es_have_file(const char *path) { return access(path, R_OK) == 0; }

/* Report this test as skipped ("skip: <why>", flushed before the forked test exits). */
#define ES_SKIP(...)                                                 \
    do {                                                             \
        printf("skip: " __VA_ARGS__);                                \
        printf("\n");                                                \
        fflush(stdout);                                              \
    } while (0)

#define ES_CHECK_MAIN(make_suite)                                    \
    int main(void)                                                   \
    {                                                                \
        es_ck_catch_fatal();                                         \
        SRunner *sr = srunner_create(make_suite());                  \
        srunner_run_all(sr, CK_NORMAL);                              \
        int failed = srunner_ntests_failed(sr);                      \
        srunner_free(sr);                                            \
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;            \
    }
#endif
