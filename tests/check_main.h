/* Shared main() for Check test programs: ES_CHECK_MAIN(make_suite) runs the suite
 * and exits non-zero when any test failed. Data paths: ES_SHARED_DATA is
 * ../shared/data relative to the repository root (tests run from the root).
 * A test that cannot run (its data is absent) calls ES_SKIP and returns:
 * tests/run-unit.sh counts every "skip:" line as skipped, not passed. */
#ifndef ES_CHECK_MAIN_H
#define ES_CHECK_MAIN_H
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
        SRunner *sr = srunner_create(make_suite());                  \
        srunner_run_all(sr, CK_NORMAL);                              \
        int failed = srunner_ntests_failed(sr);                      \
        srunner_free(sr);                                            \
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;            \
    }
#endif
