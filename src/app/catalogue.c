/* The run-time catalogue of models and matrices (reference counted): its
 * lookups, and the copy-on-write changes uploads, deletions and reloads
 * publish (catalogue.h). Loading one from a configuration is config.c's. */
#include "embedscope/catalogue.h"

#include <stdlib.h>
#include <string.h>

/* Characters allowed in model and matrix names: they appear in URL paths. */
static const char NAME_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-";

/* How a file or generated matrix was made (its entry without "description", and
 * for a file the resolved path and the file's identity), so that a reload can
 * keep it when nothing changed. */
struct es_recipe {
    char *text;
    es_matrix *m;
};

/* ---------------------------------------------------------------- life */

/* See catalogue.h. */
es_catalogue *es_catalogue_new(const char *origin)
{
    es_catalogue *r = es_calloc(1, sizeof *r);
    r->refs = 1;
    r->origin = es_strdup(origin);
    return r;
}

/* Free one model's contents (not the struct). */
static void model_free(es_model *m)
{
    for (size_t i = 0; i < m->n_matrices; i++) {
        if (m->matrices[i])
            es_matrix_release(m->matrices[i]);
        free(m->matrix_names[i]);
        free(m->matrix_descriptions[i]);
        if (m->matrix_labels)
            es_labels_release(m->matrix_labels[i]);
    }
    free(m->matrices);
    free(m->matrix_labels);
    free(m->matrix_names);
    free(m->matrix_descriptions);
    free(m->matrix_created);
    free(m->name);
    free(m->description);
}

/* Add a reference (NULL passes through). Cannot fail. */
es_catalogue *es_catalogue_retain(es_catalogue *r)
{
    if (r)
        __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED);
    return r;
}

/* Drop a reference (NULL is fine); the last one frees the catalogue, releasing
 * its matrices. */
void es_catalogue_free(es_catalogue *r)
{
    if (!r || __atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (size_t i = 0; i < r->n_recipes; i++) {
        free(r->recipes[i].text);
        es_matrix_release(r->recipes[i].m);
    }
    free(r->recipes);
    es_uploads_conf_free(&r->uploads);
    for (size_t i = 0; i < r->n_models; i++)
        model_free(&r->models[i]);
    free(r->models);
    es_warm_free(r->warm, r->n_warm);
    es_server_conf_free(&r->server);
    free(r->origin);
    free(r);
}

/* ---------------------------------------------------------------- recipes */

/* See catalogue.h. */
void es_catalogue_add_recipe(es_catalogue *r, char *text, es_matrix *m)
{
    r->recipes = es_realloc(r->recipes, (r->n_recipes + 1) * sizeof *r->recipes);
    r->recipes[r->n_recipes++] = (struct es_recipe){text, es_matrix_retain(m)};
}

/* See catalogue.h. */
es_matrix *es_catalogue_recipe(const es_catalogue *r, const char *text)
{
    for (size_t i = 0; r && i < r->n_recipes; i++)
        if (strcmp(r->recipes[i].text, text) == 0)
            return r->recipes[i].m;
    return NULL;
}

/* ---------------------------------------------------------------- lookups */

/* See catalogue.h. */
long es_model_find(const es_model *m, const char *name)
{
    for (size_t i = 0; i < m->n_matrices; i++)
        if (strcmp(m->matrix_names[i], name) == 0)
            return (long)i;
    return -1;
}

/* The model of that name, or NULL. */
const es_model *es_catalogue_model(const es_catalogue *r, const char *model)
{
    for (size_t i = 0; r && model && i < r->n_models; i++)
        if (strcmp(r->models[i].name, model) == 0)
            return &r->models[i];
    return NULL;
}

/* The matrix model/matrix, or NULL. */
const es_matrix *es_catalogue_matrix(const es_catalogue *r, const char *model, const char *matrix)
{
    const es_model *m = es_catalogue_model(r, model);
    long i = m && matrix ? es_model_find(m, matrix) : -1;
    return i < 0 ? NULL : m->matrices[i];
}

/* Resolve "model/matrix": ES_E_PARAM (param) unless of that form, ES_E_NOTFOUND
 * (param) naming the unknown model or matrix. */
int es_catalogue_lookup(const es_catalogue *r, const char *id, const char *param, const es_matrix **out, es_err *err)
{
    const char *slash = id ? strchr(id, '/') : NULL;
    if (!slash || slash == id || !slash[1] || strchr(slash + 1, '/'))
        return es_fail(err, ES_E_PARAM, param, "%s: expected \"model/matrix\", got \"%s\"", param, id ? id : "");
    char model[ES_NAME_MAX + 1];
    size_t len = (size_t)(slash - id);
    if (len > ES_NAME_MAX)
        return es_fail(err, ES_E_NOTFOUND, param, "%s: unknown model \"%.*s\"", param, (int)len, id);
    memcpy(model, id, len);
    model[len] = '\0';
    const es_model *m = es_catalogue_model(r, model);
    if (!m)
        return es_fail(err, ES_E_NOTFOUND, param, "%s: unknown model \"%s\"", param, model);
    long i = es_model_find(m, slash + 1);
    if (i < 0)
        return es_fail(err, ES_E_NOTFOUND, param, "%s: model \"%s\" has no matrix \"%s\"", param, model, slash + 1);
    *out = m->matrices[i];
    return 0;
}

/* See catalogue.h. */
es_labels *es_catalogue_labels(const es_catalogue *r, const char *model, const char *matrix)
{
    const es_model *mod = es_catalogue_model(r, model);
    long i = mod ? es_model_find(mod, matrix) : -1;
    return i >= 0 && mod->matrix_labels ? mod->matrix_labels[i] : NULL;
}

/* See catalogue.h. */
void es_catalogue_user_totals(const es_catalogue *r, size_t *count, size_t *bytes)
{
    *count = 0;
    *bytes = 0;
    for (size_t i = 0; i < r->n_models; i++) {
        if (!r->models[i].user)
            continue;
        *count += r->models[i].n_matrices;
        for (size_t j = 0; j < r->models[i].n_matrices; j++)
            *bytes += es_matrix_bytes(r->models[i].matrices[j]);
    }
}

/* ---------------------------------------------------------------- names */

/* See catalogue.h: ES_NAME_RULE. */
bool es_catalogue_valid_name(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= ES_NAME_MAX && strspn(s, NAME_CHARS) == n && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* See catalogue.h: ES_E_PARAM naming param unless a valid model or matrix name. */
int es_catalogue_check_name(const char *name, const char *param, es_err *err)
{
    if (es_catalogue_valid_name(name))
        return 0;
    return es_fail(err, ES_E_PARAM, param, "%s: invalid name \"%.80s\": use " ES_NAME_RULE, param, name, ES_NAME_MAX);
}

/* ---------------------------------------------------------------- changes */

/* Deep copy of src into dst with room for `extra` more matrices (retained). */
static void model_copy(es_model *dst, const es_model *src, size_t extra)
{
    size_t n = src->n_matrices, cap = n + extra;
    *dst = (es_model){.name = es_strdup(src->name), .description = es_strdup(src->description), .n_matrices = n,
                      .user = src->user, .n_heads = src->n_heads};
    dst->matrices = es_calloc(cap, sizeof *dst->matrices);
    dst->matrix_names = es_calloc(cap, sizeof *dst->matrix_names);
    dst->matrix_descriptions = es_calloc(cap, sizeof *dst->matrix_descriptions);
    dst->matrix_created = es_calloc(cap, sizeof *dst->matrix_created);
    dst->matrix_labels = es_calloc(cap, sizeof *dst->matrix_labels);
    for (size_t i = 0; i < n; i++) {
        dst->matrix_labels[i] = src->matrix_labels ? es_labels_retain(src->matrix_labels[i]) : NULL;
        dst->matrices[i] = es_matrix_retain(src->matrices[i]);
        dst->matrix_names[i] = es_strdup(src->matrix_names[i]);
        dst->matrix_descriptions[i] = es_strdup(src->matrix_descriptions[i]);
        dst->matrix_created[i] = src->matrix_created[i];
    }
}

/* A deep copy of r (one reference, matrices retained) of the next generation,
 * with room for one more model and one more matrix in each. Cannot fail. */
static es_catalogue *catalogue_clone(const es_catalogue *r)
{
    es_catalogue *c = es_catalogue_new(r->origin);
    c->n_models = r->n_models;
    c->limits = r->limits;
    c->n_warm = r->n_warm;
    c->generation = r->generation + 1;
    c->n_recipes = r->n_recipes;
    c->models = es_calloc(r->n_models + 1, sizeof *c->models);
    for (size_t i = 0; i < r->n_models; i++)
        model_copy(&c->models[i], &r->models[i], 1);
    es_server_conf_copy(&c->server, &r->server);
    c->warm = es_warm_copy(r->warm, r->n_warm);
    es_uploads_conf_copy(&c->uploads, &r->uploads);
    c->recipes = es_calloc(r->n_recipes ? r->n_recipes : 1, sizeof *c->recipes);
    for (size_t i = 0; i < r->n_recipes; i++)
        c->recipes[i] = (struct es_recipe){es_strdup(r->recipes[i].text), es_matrix_retain(r->recipes[i].m)};
    return c;
}

/* Open a slot for the new matrix NAME in mod (room for one more, made by
 * model_copy) and return its index: user models keep their matrices sorted by
 * name, so that every daemon lists the same catalogue whatever order the
 * uploads came in; a configured model appends. */
static long user_slot(es_model *mod, const char *name)
{
    size_t at = mod->n_matrices;
    while (mod->user && at > 0 && strcmp(mod->matrix_names[at - 1], name) > 0)
        at--;
    size_t tail = mod->n_matrices++ - at;
    memmove(mod->matrices + at + 1, mod->matrices + at, tail * sizeof *mod->matrices);
    memmove(mod->matrix_names + at + 1, mod->matrix_names + at, tail * sizeof *mod->matrix_names);
    memmove(mod->matrix_descriptions + at + 1, mod->matrix_descriptions + at, tail * sizeof *mod->matrix_descriptions);
    memmove(mod->matrix_created + at + 1, mod->matrix_created + at, tail * sizeof *mod->matrix_created);
    memmove(mod->matrix_labels + at + 1, mod->matrix_labels + at, tail * sizeof *mod->matrix_labels);
    mod->matrix_labels[at] = NULL;
    return (long)at;
}

/* See catalogue.h. */
es_catalogue *es_catalogue_with(const es_catalogue *r, const char *model, const char *name, es_matrix *m,
                                const char *description, double created)
{
    es_catalogue *c = catalogue_clone(r);
    es_model *mod = (es_model *)es_catalogue_model(c, model);
    if (!mod) {
        size_t at = c->n_models;
        while (at > 0 && c->models[at - 1].user && strcmp(c->models[at - 1].name, model) > 0)
            at--;
        memmove(c->models + at + 1, c->models + at, (c->n_models++ - at) * sizeof *c->models);
        mod = &c->models[at];
        es_model empty = {.name = (char *)model, .description = (char *)"", .user = true};
        model_copy(mod, &empty, 1);
    }
    long i = es_model_find(mod, name);
    if (i >= 0) { /* new data: the old labels went with the old rows */
        es_matrix_release(mod->matrices[i]);
        free(mod->matrix_descriptions[i]);
        es_labels_release(mod->matrix_labels[i]);
        mod->matrix_labels[i] = NULL;
    } else {
        i = user_slot(mod, name);
        mod->matrix_names[i] = es_strdup(name);
    }
    mod->matrices[i] = es_matrix_retain(m);
    mod->matrix_descriptions[i] = es_strdup(description ? description : "");
    mod->matrix_created[i] = created;
    return c;
}

/* See catalogue.h. */
es_catalogue *es_catalogue_without(const es_catalogue *r, const char *model, const char *name)
{
    es_catalogue *c = catalogue_clone(r);
    es_model *mod = (es_model *)es_catalogue_model(c, model);
    long i = mod ? es_model_find(mod, name) : -1;
    if (i < 0)
        return c;
    es_matrix_release(mod->matrices[i]);
    free(mod->matrix_names[i]);
    free(mod->matrix_descriptions[i]);
    es_labels_release(mod->matrix_labels[i]);
    size_t tail = mod->n_matrices - (size_t)i - 1;
    memmove(mod->matrices + i, mod->matrices + i + 1, tail * sizeof *mod->matrices);
    memmove(mod->matrix_names + i, mod->matrix_names + i + 1, tail * sizeof *mod->matrix_names);
    memmove(mod->matrix_descriptions + i, mod->matrix_descriptions + i + 1, tail * sizeof *mod->matrix_descriptions);
    memmove(mod->matrix_created + i, mod->matrix_created + i + 1, tail * sizeof *mod->matrix_created);
    memmove(mod->matrix_labels + i, mod->matrix_labels + i + 1, tail * sizeof *mod->matrix_labels);
    if (--mod->n_matrices == 0) {
        model_free(mod);
        size_t at = (size_t)(mod - c->models);
        memmove(c->models + at, c->models + at + 1, (c->n_models - at - 1) * sizeof *c->models);
        c->n_models--;
    }
    return c;
}

/* See catalogue.h. */
es_catalogue *es_catalogue_with_labels(const es_catalogue *r, const char *model, const char *name, es_labels *labels)
{
    es_catalogue *c = catalogue_clone(r);
    es_model *mod = (es_model *)es_catalogue_model(c, model);
    long i = mod ? es_model_find(mod, name) : -1;
    if (i >= 0) {
        es_labels_release(mod->matrix_labels[i]);
        mod->matrix_labels[i] = es_labels_retain(labels);
    }
    return c;
}

/* See catalogue.h. */
size_t es_catalogue_adopt_user(es_catalogue *fresh, const es_catalogue *old)
{
    size_t dropped = 0;
    fresh->generation = old->generation + 1;
    for (size_t i = 0; i < old->n_models; i++) {
        const es_model *m = &old->models[i];
        if (!m->user)
            continue;
        if (es_catalogue_model(fresh, m->name)) {
            es_warn("reload: the configuration now defines model \"%s\"; its %zu uploaded matrices are dropped",
                    m->name, m->n_matrices);
            dropped++;
            continue;
        }
        fresh->models = es_realloc(fresh->models, (fresh->n_models + 1) * sizeof *fresh->models);
        model_copy(&fresh->models[fresh->n_models++], m, 0);
    }
    return dropped;
}
