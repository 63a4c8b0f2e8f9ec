/* Helpers shared by the store's loaders (not part of the public API). */
#ifndef EMBEDSCOPE_STORE_INTERNAL_H
#define EMBEDSCOPE_STORE_INTERNAL_H

#include "embedscope/store.h"

/* Fill err with ES_E_FORMAT (param "file") and the message
 * "FILE: RULE at byte OFFSET", RULE formatted from fmt; returns -1. */
int es_format_fail(es_err *err, const es_file *f, size_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A new es_tensor over f with name copied and everything else zero, shape 1 x 1. */
es_tensor *es_tensor_new(const es_file *f, const char *name);

/* A validated safetensors file (header decoded, every rule checked), from which
 * tensors are taken without validating again. It borrows the file. */
typedef struct es_st_layout es_st_layout;
/* Validate the whole of f (rules 1-7); ES_E_FORMAT naming the rule and offset. */
int es_safetensors_validate(const es_file *f, es_st_layout **out, es_err *err);
/* Tensor `name` of a validated file; ES_E_NOTFOUND (param "tensor") if absent,
 * ES_E_FORMAT if its rank is above 2 or its dtype cannot be converted. */
int es_safetensors_tensor(const es_st_layout *l, const char *name, es_tensor **out, es_err *err);
/* Free a layout; NULL is a no-op. */
void es_st_layout_free(es_st_layout *l);

/* The provenance view text of a view of m: "WHAT of ID", after m's own view
 * description and "; " when it has one. Newly allocated; cannot fail. */
char *es_view_description(const es_matrix *m, const char *what);

#endif
