/* The positional analyses on the real weights against numpy goldens
 * (tests/golden/golden_positional.json, made by make_golden_positional.py):
 * row-norm outliers, Toeplitz scores, q/k/v alignment with W_pos, periodicity,
 * averaging, degeneracy, and — when ../shared/data holds the full GPT-2 file —
 * positional-only attention of layers 0 and 5. */
#include <jansson.h>
#include "analysis/helpers.h"
#include "check_main.h"
#include "embedscope/positional.h"

#define GOLDEN "tests/golden/golden_positional.json"
#define SAFETENSORS ES_SHARED_DATA "/gpt2-small/gpt2-small-partial.safetensors"
#define REL 1e-9

static json_t *golden;

static void load_golden(void)
{
    json_error_t jerr;
    golden = json_load_file(GOLDEN, 0, &jerr);
    ck_assert_msg(golden != NULL, "%s: %s", GOLDEN, jerr.text);
}

static void unload_golden(void) { json_decref(golden); }

/* Follow a path of object keys from the golden root. */
static json_t *at(const char *k1, const char *k2)
{
    json_t *v = json_object_get(golden, k1);
    if (v && k2)
        v = json_object_get(v, k2);
    ck_assert_msg(v != NULL, "golden has no %s/%s", k1, k2 ? k2 : "");
    return v;
}

static double num(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "golden key %s is not a number", key);
    return json_number_value(v);
}

/* Relative closeness with a tiny absolute floor for values near 0. */
static void ck_close(double got, double want, double rel, const char *what)
{
    ck_assert_msg(fabs(got - want) <= rel * fabs(want) + 1e-13, "%s: got %.17g want %.17g", what,
                  got, want);
}

static es_matrix *load(const char *id, const char *path, const char *tensor, es_axis axis)
{
    es_matrix *m = NULL;
    es_err err = { 0 };
    ck_assert_msg(es_matrix_load(id, path, tensor, axis, &m, &err) == 0, "%s", err.message);
    return m;
}

/* Indices start, start + step, ... below stop; *n receives the count. */
static size_t *range(size_t start, size_t stop, size_t step, size_t *n)
{
    size_t *idx = es_malloc(((stop - start) / step + 1) * sizeof *idx);
    *n = 0;
    for (size_t i = start; i < stop; i += step)
        idx[(*n)++] = i;
    return idx;
}

static es_matrix *wpe_by_name(const char *name)
{
    return strcmp(name, "gpt2-small/wpe") == 0
               ? load(name, ES_REPO_DATA "/gpt2-small/wpe.npy", NULL, ES_AXIS_COLUMNS)
               : load(name, ES_REPO_DATA "/openai-gpt/wpe.npy", NULL, ES_AXIS_COLUMNS);
}

START_TEST(outliers_match_numpy)
{
    const char *names[] = { "gpt2-small/wpe", "openai-gpt/wpe" };
    for (size_t c = 0; c < 2; c++) {
        json_t *g = at("outliers", names[c]);
        es_matrix *m = wpe_by_name(names[c]);
        size_t n;
        size_t *idx = range(0, es_matrix_items(m), 1, &n);
        es_outliers *o = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_outliers_compute(m, idx, n, num(g, "threshold"), &o, &err), 0);
        ck_close(o->median, num(g, "median"), REL, "median");
        ck_close(o->mad, num(g, "mad"), REL, "mad");
        json_t *flagged = json_object_get(g, "flagged");
        ck_assert_uint_eq(o->n_flagged, json_array_size(flagged));
        for (size_t i = 0; i < o->n_flagged; i++)
            ck_assert_uint_eq(o->flagged[i], (size_t)json_integer_value(json_array_get(flagged, i)));
        printf("outliers %s: %zu flagged (first %zu, last %zu)\n", names[c], o->n_flagged,
               o->n_flagged ? o->flagged[0] : 0, o->n_flagged ? o->flagged[o->n_flagged - 1] : 0);
        es_outliers_free(o);
        free(idx);
        es_matrix_release(m);
    }
}
END_TEST

START_TEST(toeplitz_matches_numpy)
{
    const char *names[] = { "gpt2-small/wpe", "openai-gpt/wpe" };
    for (size_t c = 0; c < 2; c++) {
        json_t *g = at("toeplitz", names[c]);
        es_matrix *m = wpe_by_name(names[c]);
        size_t n;
        size_t *idx = range(0, es_matrix_items(m), 1, &n);
        for (int kind = ES_GRAM_DOT; kind <= ES_GRAM_COSINE; kind++) {
            es_toeplitz *t = NULL;
            es_err err = { 0 };
            ck_assert_int_eq(es_toeplitz_compute(m, idx, n, (es_gram_kind)kind, &t, &err), 0);
            ck_close(t->score, num(g, kind == ES_GRAM_COSINE ? "cosine" : "gram"), REL, "toeplitz score");
            es_toeplitz_free(t);
        }
        free(idx);
        es_matrix_release(m);
    }
}
END_TEST

/* q, k, v of layer 0 (columns blocks of c_attn, model axis rows) against W_pos rows
 * 1: centred by columns, top-10. */
START_TEST(alignment_matches_numpy)
{
    json_t *g = at("alignment", NULL);
    size_t k = (size_t)json_integer_value(json_object_get(g, "k"));
    es_matrix *wpe = wpe_by_name("gpt2-small/wpe");
    es_matrix *c_attn = load("gpt2-small/c_attn", ES_REPO_DATA "/gpt2-small/h0_c_attn.npy", NULL,
                             ES_AXIS_ROWS);
    size_t n;
    size_t *idx = range(1, 1024, 1, &n);
    es_svd *r = svd_of(wpe, idx, n, ES_CENTER_COLUMNS);
    const char *names[] = { "q", "k", "v" };
    for (size_t c = 0; c < 3; c++) {
        json_t *gw = json_object_get(json_object_get(g, "weights"), names[c]);
        es_matrix *view = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_view_columns(c_attn, names[c], 768 * c, 768 * (c + 1), &view, &err), 0);
        es_svd *w = svd_of(view, NULL, 0, ES_CENTER_NONE);
        es_alignment *a = NULL;
        ck_assert_msg(es_alignment_compute(w, r, k, 10, 10, 0, &a, &err) == 0, "%s", err.message);
        json_t *cap = json_object_get(gw, "capture");
        ck_assert_uint_eq(a->capture->count, json_array_size(cap));
        for (size_t j = 0; j < a->capture->count; j++)
            ck_close(a->capture->capture[j], json_number_value(json_array_get(cap, j)), REL, "capture");
        json_t *top = json_object_get(gw, "top_mean");
        ck_assert_uint_eq(a->n_top, 5);
        for (size_t i = 0; i < a->n_top; i++) {
            char key[16];
            snprintf(key, sizeof key, "%zu", a->top_m[i]);
            ck_close(a->top_mean[i], num(top, key), REL, "top mean");
        }
        json_t *ov = json_object_get(gw, "overlap10");
        for (size_t i = 0; i < 10; i++)
            for (size_t j = 0; j < 10; j++)
                ck_close(a->overlap->values[i * 10 + j],
                         json_number_value(json_array_get(json_array_get(ov, i), j)), 1e-8, "overlap");
        printf("alignment %s vs W_pos top-%zu: mean capture of top 1/5/10 = %.3f %.3f %.3f "
               "(baseline %.4f)\n", names[c], k, a->top_mean[0], a->top_mean[1], a->top_mean[2],
               a->capture->baseline);
        es_alignment_free(a);
        es_svd_release(w);
        es_matrix_release(view);
    }
    es_svd_release(r);
    free(idx);
    es_matrix_release(c_attn);
    es_matrix_release(wpe);
}
END_TEST

/* Periods (peak bins, shares exactly; refined periods and turns, flat maxima, to 1e-6) and helix turns. */
START_TEST(periodicity_matches_numpy)
{
    json_t *cases = at("periodicity", NULL);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *g = json_array_get(cases, c);
        const char *rows = json_string_value(json_object_get(g, "rows"));
        size_t start, stop, step, m = (size_t)json_integer_value(json_object_get(g, "m"));
        ck_assert_int_eq(sscanf(rows, "%zu:%zu:%zu", &start, &stop, &step), 3);
        es_matrix *wpe = wpe_by_name(stop == 512 ? "openai-gpt/wpe" : "gpt2-small/wpe");
        size_t n;
        size_t *idx = range(start, stop, step, &n);
        es_svd *s = svd_of(wpe, idx, n, ES_CENTER_COLUMNS);
        es_periodicity *p = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_periodicity_from_svd(s, wpe, m, ES_PERIOD_ALPHA, &p, &err), 0);
        ck_assert_int_eq(p->step, (long)step);
        json_t *comps = json_object_get(g, "components");
        for (size_t j = 0; j < m; j++) {
            json_t *gc = json_array_get(comps, j);
            ck_assert_uint_eq(p->components[j].peak_bin, (size_t)num(gc, "peak_bin"));
            ck_close(p->components[j].peak_share, num(gc, "peak_share"), REL, "peak share");
            const es_period *pc = &p->components[j];
            ck_close(pc->fit_period, num(gc, "fit_period"), 1e-6, "fit period");
            ck_assert_str_eq(es_period_verdict_name(pc->verdict),
                             json_string_value(json_object_get(gc, "verdict")));
            ck_assert_double_eq(pc->period, pc->found ? pc->fit_period : 0);
            ck_assert_uint_eq(pc->n_ordinates, (size_t)num(gc, "n_ordinates"));
            ck_close(pc->g, num(gc, "g"), REL, "Fisher g");
            /* numpy sums the series exactly (fractions); ours is exact or a lower bound */
            if (pc->p_exact)
                ck_assert_msg(fabs(pc->p_value - num(gc, "p_value")) <= 1e-9 * num(gc, "p_value") + 1e-300,
                              "p %.17g want %.17g", pc->p_value, num(gc, "p_value"));
            else
                ck_assert(pc->p_value <= num(gc, "p_value"));
        }
        json_t *plane = json_object_get(g, "turn_plane");
        ck_assert_uint_eq(p->turn_plane[0], (size_t)json_integer_value(json_array_get(plane, 0)));
        ck_assert_uint_eq(p->turn_plane[1], (size_t)json_integer_value(json_array_get(plane, 1)));
        ck_close(p->turns, num(g, "turns"), 1e-6, "turns"); /* a refined maximum, as the fit periods */
        printf("periodicity %s rows %s: PC1 period %.1f (%s), %.2f turns in plane (%zu, %zu)\n",
               wpe->id, rows, p->components[0].fit_period, es_period_verdict_name(p->components[0].verdict), p->turns,
               p->turn_plane[0], p->turn_plane[1]);
        es_periodicity_free(p);
        es_svd_release(s);
        free(idx);
        es_matrix_release(wpe);
    }
}
END_TEST

START_TEST(averaging_matches_numpy)
{
    json_t *cases = at("averaging", NULL);
    es_matrix *wpe = wpe_by_name("gpt2-small/wpe");
    es_svd *pca = svd_of(wpe, NULL, 0, ES_CENTER_COLUMNS);
    for (size_t c = 0; c < json_array_size(cases); c++) {
        json_t *g = json_array_get(cases, c);
        es_matrix *avg = NULL;
        es_averaging *s = NULL;
        es_err err = { 0 };
        ck_assert_int_eq(es_matrix_average_rows(wpe, "avg", (size_t)num(g, "g"), &avg, &err), 0);
        ck_assert_int_eq(es_averaging_compute(pca, wpe, avg, &s, &err), 0);
        ck_close(s->mean_disp, num(g, "mean_disp"), REL, "mean displacement");
        ck_close(s->max_disp, num(g, "max_disp"), REL, "max displacement");
        ck_close(s->radius, num(g, "radius"), REL, "radius");
        ck_assert_uint_eq(s->max_row, (size_t)num(g, "max_row"));
        es_averaging_free(s);
        es_matrix_release(avg);
    }
    es_svd_release(pca);
    es_matrix_release(wpe);
}
END_TEST

START_TEST(degeneracy_matches_numpy)
{
    json_t *g = at("degeneracy", NULL);
    es_matrix *wpe = wpe_by_name("gpt2-small/wpe");
    es_svd *pca = svd_of(wpe, NULL, 0, ES_CENTER_COLUMNS);
    es_degeneracy *d = NULL;
    es_err err = { 0 };
    ck_assert_int_eq(es_degeneracy_find(pca->s, pca->r, num(g, "threshold"), &d, &err), 0);
    json_t *groups = json_object_get(g, "groups");
    ck_assert_uint_eq(d->count, json_array_size(groups));
    for (size_t i = 0; i < d->count; i++) {
        json_t *gr = json_array_get(groups, i);
        ck_assert_uint_eq(d->start[i], (size_t)json_integer_value(json_array_get(gr, 0)));
        ck_assert_uint_eq(d->end[i], (size_t)json_integer_value(json_array_get(gr, 1)));
    }
    es_degeneracy_free(d);
    es_svd_release(pca);
    es_matrix_release(wpe);
}
END_TEST

/* One layer of the full safetensors file (borrowed matrices released by the caller). */
typedef struct real_layer {
    es_matrix *m[5];
    es_attn_layer layer;
} real_layer;

static real_layer load_layer(size_t l)
{
    const char *suffix[] = { "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias" };
    real_layer r = { 0 };
    r.m[0] = load("wpe", SAFETENSORS, "wpe.weight", ES_AXIS_COLUMNS);
    for (size_t i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "h.%zu.%s", l, suffix[i]);
        r.m[i + 1] = load(name, SAFETENSORS, name, i == 2 ? ES_AXIS_ROWS : ES_AXIS_COLUMNS);
    }
    r.layer = (es_attn_layer){ .layer = l, .pos = r.m[0], .ln_weight = r.m[1], .ln_bias = r.m[2],
                               .qkv_weight = r.m[3], .qkv_bias = r.m[4], .n_heads = 12,
                               .eps = 1e-5 };
    return r;
}

static void free_layer(real_layer *r)
{
    for (size_t i = 0; i < 5; i++)
        es_matrix_release(r->m[i]);
}

START_TEST(attention_matches_numpy)
{
    json_t *g = json_object_get(golden, "attention");
    if (!es_have_file(SAFETENSORS) || json_is_null(g)) {
        ES_SKIP("%s absent, positional-attention goldens not checked", SAFETENSORS);
        return;
    }
    json_t *layers = json_object_get(g, "layers");
    for (size_t li = 0; li < json_array_size(layers); li++) {
        json_t *gl = json_array_get(layers, li);
        real_layer r = load_layer((size_t)num(gl, "layer"));
        json_t *ranges = json_object_get(gl, "ranges");
        for (size_t ri = 0; ri < json_array_size(ranges); ri++) {
            json_t *gr = json_array_get(ranges, ri);
            es_attn_scores *s = NULL;
            es_err err = { 0 };
            ck_assert_int_eq(es_attn_scores_compute(&r.layer, (size_t)num(gr, "q_start"),
                                                    (size_t)num(gr, "q_stop"), &s, &err), 0);
            for (size_t h = 0; h < 12; h++) {
                ck_close(s->heads[h].prev, json_number_value(json_array_get(json_object_get(gr, "prev"), h)), REL, "prev");
                ck_close(s->heads[h].self, json_number_value(json_array_get(json_object_get(gr, "self"), h)), REL, "self");
                ck_close(s->heads[h].distance, json_number_value(json_array_get(json_object_get(gr, "distance"), h)), REL, "distance");
            }
            if (ri == 0) {
                const es_attn_scores *one[] = { s };
                es_attn_ranking *rank = NULL;
                ck_assert_int_eq(es_attn_rank(one, 1, &rank, &err), 0);
                printf("layer %zu: best previous-token head %zu (prev %.3f)\n", r.layer.layer,
                       rank->heads[0].head, rank->heads[0].prev);
                es_attn_ranking_free(rank);
            }
            es_attn_scores_free(s);
        }
        json_t *gp = json_object_get(g, "pattern");
        if ((size_t)num(gp, "layer") == r.layer.layer) {
            es_grid *grid = NULL;
            es_err err = { 0 };
            ck_assert_int_eq(es_attn_pattern(&r.layer, (size_t)num(gp, "head"), (size_t)num(gp, "q_start"),
                                             (size_t)num(gp, "q_stop"), (size_t)num(gp, "bins"), &grid, &err), 0);
            json_t *vals = json_object_get(gp, "values"), *re = json_object_get(gp, "row_edges"),
                   *ce = json_object_get(gp, "col_edges");
            ck_assert_uint_eq(grid->rows, json_array_size(vals));
            for (size_t i = 0; i <= grid->rows; i++)
                ck_assert_uint_eq(grid->row_edges[i], (size_t)json_integer_value(json_array_get(re, i)));
            for (size_t j = 0; j <= grid->cols; j++)
                ck_assert_uint_eq(grid->col_edges[j], (size_t)json_integer_value(json_array_get(ce, j)));
            for (size_t i = 0; i < grid->rows; i++)
                for (size_t j = 0; j < grid->cols; j++)
                    ck_close(grid->values[i * grid->cols + j],
                             json_number_value(json_array_get(json_array_get(vals, i), j)), REL, "pattern");
            es_grid_free(grid);
        }
        free_layer(&r);
    }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("golden_positional");
    TCase *tc = tcase_create("real data");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, load_golden, unload_golden);
    tcase_add_test(tc, outliers_match_numpy);
    tcase_add_test(tc, toeplitz_matches_numpy);
    tcase_add_test(tc, alignment_matches_numpy);
    tcase_add_test(tc, periodicity_matches_numpy);
    tcase_add_test(tc, averaging_matches_numpy);
    tcase_add_test(tc, degeneracy_matches_numpy);
    tcase_add_test(tc, attention_matches_numpy);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
