/* embedscope catalogue: the models and matrices the daemon serves, with the
 * settings they were loaded with (es_catalogue). A configuration builds one
 * (config.h); uploads, deletions and reloads publish changed copies.
 * Ownership and failure rules: see core.h. */
#ifndef EMBEDSCOPE_CATALOGUE_H
#define EMBEDSCOPE_CATALOGUE_H

#include <stdbool.h>
#include <stddef.h>
#include "embedscope/core.h"
#include "embedscope/labels.h"
#include "embedscope/settings.h"
#include "embedscope/store.h"

/* Model and matrix names appear in URL paths: ES_NAME_RULE, a printf format
 * taking ES_NAME_MAX, says which are valid in messages. */
#define ES_NAME_MAX 64
#define ES_NAME_RULE "1 to %d characters of [A-Za-z0-9._-], not \".\" or \"..\""

typedef struct es_model {
    char *name;
    char *description;
    es_matrix **matrices;     /* in config order; ids are "model/matrix" */
    char **matrix_names;      /* short names, parallel to matrices */
    char **matrix_descriptions; /* parallel to matrices; "" when the config gives none */
    double *matrix_created;   /* parallel to matrices: Unix time its data was made: a configured file's
                                 modification time, the binary's for configured generated matrices and
                                 views, the upload's time for user matrices */
    es_labels **matrix_labels; /* parallel to matrices: labels and metadata of the items, NULL: none */
    size_t n_matrices;
    bool user;                /* created by uploads, not by the configuration */
    size_t n_heads;           /* attention heads ("n_heads"), 0 when not configured */
} es_model;

struct es_recipe;

typedef struct es_catalogue {
    char *origin;             /* config path, or "embedded default" */
    es_model *models;
    size_t n_models;
    es_server_conf server;
    es_limits limits;
    es_warm *warm;
    size_t n_warm;
    es_uploads_conf uploads;
    unsigned long generation; /* grows with every change of the catalogue */
    size_t n_reused;          /* matrices a reload kept from the previous catalogue */
    unsigned long serial;     /* set when an es_app takes it (es_app_init, es_app_publish): unique per
                               * catalogue in the process; 0 until then (src/api/memo.c keys by it) */
    /* private (es_catalogue_add_recipe): how each file or generated matrix was
     * made, so that a reload keeps those whose recipe did not change */
    struct es_recipe *recipes;
    size_t n_recipes;
    int refs;
} es_catalogue;

/* A new, empty catalogue (one reference) named by origin (copied); the loader
 * fills it before anyone else sees it. Never fails. */
es_catalogue *es_catalogue_new(const char *origin);

/* Catalogues are immutable once loaded and reference counted: requests hold
 * the daemon's current one for their duration while writers publish changed
 * copies. es_catalogue_retain adds a reference (NULL passes);
 * es_catalogue_free drops one and frees the catalogue, releasing its matrices,
 * with the last (NULL is a no-op). Neither fails. */
es_catalogue *es_catalogue_retain(es_catalogue *r);
void es_catalogue_free(es_catalogue *r);

/* Recipes, for the loader (a catalogue being built): record that m (retained)
 * was made by `text` (taken over), and find the matrix a recipe made (borrowed)
 * or NULL. Neither fails. */
void es_catalogue_add_recipe(es_catalogue *r, char *text, es_matrix *m);
es_matrix *es_catalogue_recipe(const es_catalogue *r, const char *text);

/* Lookups return borrowed pointers or NULL. */
const es_model *es_catalogue_model(const es_catalogue *r, const char *model);
const es_matrix *es_catalogue_matrix(const es_catalogue *r, const char *model, const char *matrix);
/* The index of the matrix NAME in model m, or -1. */
long es_model_find(const es_model *m, const char *name);
/* "model/matrix" form. ES_E_NOTFOUND naming param if unknown, ES_E_PARAM if not of that form. */
int es_catalogue_lookup(const es_catalogue *r, const char *id, const char *param,
                        const es_matrix **out, es_err *err);
/* The labels of MODEL/MATRIX (borrowed), or NULL when it has none or is absent. */
es_labels *es_catalogue_labels(const es_catalogue *r, const char *model, const char *matrix);
/* Number of matrices in user models and the bytes of storage they hold. */
void es_catalogue_user_totals(const es_catalogue *r, size_t *count, size_t *bytes);

/* Is name a valid model or matrix name (ES_NAME_RULE)? es_catalogue_check_name:
 * 0 if so, else ES_E_PARAM naming `param`. */
bool es_catalogue_valid_name(const char *name);
int es_catalogue_check_name(const char *name, const char *param, es_err *err);

/* A new catalogue (one reference) equal to r but with MODEL/NAME set to m
 * (retained), created at `created` (Unix time), replacing a matrix of that name;
 * MODEL is created as a user model if absent. User models follow the
 * configured ones sorted by name, their matrices too (one listing whatever the
 * order of uploads). The caller checks that MODEL is not configured. Never
 * fails. */
es_catalogue *es_catalogue_with(const es_catalogue *r, const char *model, const char *name, es_matrix *m,
                                const char *description, double created);
/* A new catalogue (one reference) equal to r without MODEL/NAME (which must
 * exist); the model goes with its last matrix. Never fails. */
es_catalogue *es_catalogue_without(const es_catalogue *r, const char *model, const char *name);
/* A new catalogue (one reference) equal to r with the labels of MODEL/NAME set
 * to labels (retained; NULL drops them). The caller checks that they fit the
 * matrix's items. r unchanged but copied when MODEL/NAME is absent. Never fails. */
es_catalogue *es_catalogue_with_labels(const es_catalogue *r, const char *model, const char *name, es_labels *labels);
/* Add to `fresh` (just loaded, not yet shared) the user models of `old` whose
 * names the new configuration does not use; a user model whose name it took is
 * dropped with a warning in the log. Returns the number dropped; never fails. */
size_t es_catalogue_adopt_user(es_catalogue *fresh, const es_catalogue *old);

#endif
