/* OpenBLAS kernels and threads: the kernel decision against simulated core
 * names and CPU flags, the start-up self-test, the cores this process may use
 * (a narrowed CPU affinity, as taskset gives) and the thread division, which
 * never exceeds them. */
#include <cblas.h>
#include <check.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "embedscope/blas.h"
#include "embedscope/core.h"

static const es_cpu_features none = {0};
static const es_cpu_features avx_only = {.avx = true};
static const es_cpu_features avx2_no_fma = {.avx = true, .avx2 = true};
static const es_cpu_features avx2 = {.avx = true, .avx2 = true, .fma = true};
static const es_cpu_features avx512_no_vl = {.avx = true, .avx2 = true, .fma = true, .avx512f = true,
                                             .avx512dq = true, .avx512bw = true};
static const es_cpu_features avx512 = {.avx = true, .avx2 = true, .fma = true, .avx512f = true,
                                       .avx512dq = true, .avx512bw = true, .avx512vl = true};

START_TEST(cpu_isa_needs_every_flag)
{
    ck_assert_int_eq(es_cpu_isa(&none), ES_ISA_BASELINE);
    ck_assert_int_eq(es_cpu_isa(&avx_only), ES_ISA_AVX);
    ck_assert_int_eq(es_cpu_isa(&avx2_no_fma), ES_ISA_AVX);
    ck_assert_int_eq(es_cpu_isa(&avx2), ES_ISA_AVX2);
    ck_assert_int_eq(es_cpu_isa(&avx512_no_vl), ES_ISA_AVX2);
    ck_assert_int_eq(es_cpu_isa(&avx512), ES_ISA_AVX512);
    ck_assert_str_eq(es_isa_name(ES_ISA_AVX512), "avx512");
    ck_assert_str_eq(es_isa_name(ES_ISA_BASELINE), "baseline");
}
END_TEST

START_TEST(core_names)
{
    static const char *const generic[] = {"Prescott", "Katmai", "Coppermine", "Northwood", "Banias", "Atom",
                                          "Core2", "Penryn", "Dunnington", "Nehalem", "Athlon", "Opteron",
                                          "Opteron_SSE3", "Barcelona", "Nano", "Unknown", "", "NoSuchCore"};
    for (size_t i = 0; i < sizeof generic / sizeof *generic; i++)
        ck_assert_msg(es_blas_core_isa(generic[i]) == ES_ISA_BASELINE, "%s", generic[i]);
    ck_assert_int_eq(es_blas_core_isa(NULL), ES_ISA_BASELINE);
    ck_assert_int_eq(es_blas_core_isa("Sandybridge"), ES_ISA_AVX);
    ck_assert_int_eq(es_blas_core_isa("Haswell"), ES_ISA_AVX2);
    ck_assert_int_eq(es_blas_core_isa("ZEN"), ES_ISA_AVX2);
    ck_assert_int_eq(es_blas_core_isa("skylakex"), ES_ISA_AVX512);
    ck_assert_int_eq(es_blas_core_isa("Cooperlake"), ES_ISA_AVX512);
}
END_TEST

/* The library's pick, the CPU's flags -> the core to force (NULL: keep). */
START_TEST(kernel_decision)
{
    static const struct {
        const char *core;
        const es_cpu_features *cpu;
        const char *want;
    } cases[] = {
        {"Prescott", &avx512, "SkylakeX"},  /* the Xeon of the issue: 0.3.21 does not know it */
        {"Prescott", &avx2, "Haswell"},     {"Katmai", &avx512, "SkylakeX"},  {"Core2", &avx2, "Haswell"},
        {"Nehalem", &avx512_no_vl, "Haswell"}, {"Sandybridge", &avx2, "Haswell"}, {"Unknown", &avx512, "SkylakeX"},
        {"NoSuchCore", &avx2, "Haswell"},   {"Barcelona", &avx2, "Haswell"},
        {"Prescott", &avx_only, NULL},      /* no AVX2: nothing better that the generic kernels lose to */
        {"Prescott", &avx2_no_fma, NULL},   {"Prescott", &none, NULL},        {"Sandybridge", &avx_only, NULL},
        {"Haswell", &avx512, NULL},         /* the library's own AVX2 choice on an AVX-512 CPU is kept */
        {"Zen", &avx2, NULL},               {"SkylakeX", &avx512, NULL},      {"Cooperlake", &avx512, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *got = es_blas_better_core(cases[i].core, cases[i].cpu);
        if (cases[i].want)
            ck_assert_msg(got && strcmp(got, cases[i].want) == 0, "case %zu (%s): %s", i, cases[i].core,
                          got ? got : "(keep)");
        else
            ck_assert_msg(!got, "case %zu (%s): %s", i, cases[i].core, got);
    }
}
END_TEST

/* The self-test passes on the kernels this machine runs, with one and with more threads. */
START_TEST(self_test_passes)
{
    for (int threads = 1; threads <= 2; threads++) {
        openblas_set_num_threads(threads);
        double error = -1;
        ck_assert_int_eq(es_blas_self_test(&error), 0);
        ck_assert(error >= 0 && error < 1e-12);
    }
}
END_TEST

/* Restrict this (forked) test process to its first allowed CPU, as taskset -c does. */
static void pin_to_one_cpu(void)
{
    cpu_set_t set, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    CPU_ZERO(&one);
    for (size_t c = 0; c < (size_t)CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            CPU_SET(c, &one);
            break;
        }
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
}

START_TEST(cores_follow_the_affinity)
{
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    unsigned cores = es_cores_available();
    ck_assert_uint_ge(cores, 1);
    ck_assert_uint_le(cores, (unsigned)CPU_COUNT(&set));
    pin_to_one_cpu();
    ck_assert_uint_eq(es_cores_available(), 1);
}
END_TEST

START_TEST(share_never_exceeds_the_budget)
{
    for (unsigned budget = 1; budget <= 64; budget++)
        for (unsigned jobs = 0; jobs <= 2 * budget; jobs++) {
            unsigned share = es_blas_share(budget, jobs);
            ck_assert_uint_ge(share, 1);
            ck_assert_uint_le(share, budget);
            if (jobs >= 1 && jobs <= budget) /* auto runs at most `budget` compute threads */
                ck_assert_uint_le(share * jobs, budget);
        }
    ck_assert_uint_eq(es_blas_share(16, 1), 16);
    ck_assert_uint_eq(es_blas_share(16, 3), 5);
    ck_assert_uint_eq(es_blas_share(2, 2), 1);
}
END_TEST

/* Auto: OpenBLAS's count follows the jobs running, never above the cores
 * (here one CPU, then all of them); a one-thread section wins while it runs. */
START_TEST(auto_policy_follows_the_jobs)
{
    unsigned cores = es_cores_available();
    es_blas_threads_auto(cores);
    es_blas_threads_state st;
    es_blas_threads_get(&st);
    ck_assert(st.automatic);
    ck_assert_uint_eq(st.budget, cores);
    for (unsigned jobs = 1; jobs <= cores; jobs++) {
        es_blas_job_begin();
        ck_assert_uint_eq((unsigned)openblas_get_num_threads(), es_blas_share(cores, jobs));
        ck_assert_uint_le((unsigned)openblas_get_num_threads() * jobs, cores);
    }
    es_blas_one_begin();
    ck_assert_int_eq(openblas_get_num_threads(), 1);
    /* another computation's one-thread section does not shrink a job's own share */
    ck_assert_uint_eq(es_blas_job_threads(), es_blas_share(cores, cores));
    es_blas_one_end();
    ck_assert_uint_eq((unsigned)openblas_get_num_threads(), es_blas_share(cores, cores));
    for (unsigned jobs = cores; jobs >= 1; jobs--)
        es_blas_job_end();
    ck_assert_uint_eq((unsigned)openblas_get_num_threads(), cores);
    es_blas_threads_get(&st);
    ck_assert_uint_eq(st.jobs, 0);
    ck_assert_uint_le(st.peak, cores);
}
END_TEST

START_TEST(auto_policy_on_one_cpu)
{
    pin_to_one_cpu();
    es_blas_threads_auto(es_cores_available());
    es_blas_job_begin();
    ck_assert_int_eq(openblas_get_num_threads(), 1);
    es_blas_job_end();
    es_blas_threads_state st;
    es_blas_threads_get(&st);
    ck_assert_uint_eq(st.peak, 1);
}
END_TEST

/* Fixed: every job gets the count; not managed: a one-thread section restores the caller's count. */
START_TEST(fixed_and_unmanaged)
{
    openblas_set_num_threads(2);
    ck_assert_uint_eq(es_blas_job_threads(), 2);
    es_blas_one_begin();
    ck_assert_int_eq(openblas_get_num_threads(), 1);
    ck_assert_uint_eq(es_blas_job_threads(), 2);
    es_blas_one_end();
    ck_assert_int_eq(openblas_get_num_threads(), 2);
    ck_assert_str_eq(es_blas_core_name(), openblas_get_corename());
    es_blas_threads_fixed(1);
    es_blas_job_begin();
    es_blas_job_begin();
    ck_assert_int_eq(openblas_get_num_threads(), 1);
    ck_assert_uint_eq(es_blas_job_threads(), 1);
    es_blas_job_end();
    es_blas_job_end();
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("blas");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, cpu_isa_needs_every_flag);
    tcase_add_test(tc, core_names);
    tcase_add_test(tc, kernel_decision);
    tcase_add_test(tc, self_test_passes);
    tcase_add_test(tc, cores_follow_the_affinity);
    tcase_add_test(tc, share_never_exceeds_the_budget);
    tcase_add_test(tc, auto_policy_follows_the_jobs);
    tcase_add_test(tc, auto_policy_on_one_cpu);
    tcase_add_test(tc, fixed_and_unmanaged);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
