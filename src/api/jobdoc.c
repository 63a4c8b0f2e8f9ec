/* The job document (GET /v1/jobs/{id}, the 202's body, GET /v1/jobs'
 * "requests") is the field table below and nothing else: es_job_render
 * renders jobs.c's snapshot of a job with it, es_job_describe exports it
 * (embedscope --dump-api "job"), openapi.yaml's Job schema is generated from
 * that (tools/gen_openapi.py) and the consumers (the Python client, the
 * dashboard) are tested against the dump. A member is added, renamed or
 * documented here only. */
#include "embedscope/jobs.h"
#include "embedscope/render.h"

/* The names of es_job_state, in its order (the job document's "state"). */
static const char *const state_choices[ES_JOB_STATES] = {"queued", "running", "done", "failed", "cancelled"};

/* See jobs.h. */
const char *es_job_state_name(es_job_state s) { return s < ES_JOB_STATES ? state_choices[s] : "?"; }

/* One job's values (jobs.c's snapshot) and the number context of its document. */
typedef struct job_view {
    const es_job_view *j;
    es_jctx *jc;
} job_view;

typedef struct job_field {
    const char *name;
    const char *type;           /* its JSON type: string, number, integer, boolean, object */
    bool nullable;              /* may be null */
    unsigned states;            /* bit (1 << es_job_state) set: present in that state */
    json_t *(*value)(const job_view *v);
    const struct job_field *members; /* an object's own table (value NULL) */
    json_t *(*choices)(void);   /* a string's values, or NULL */
    const char *schema;         /* an object of another documented kind ("problem"), or NULL */
    const char *doc;
} job_field;

#define ALWAYS ((1u << ES_JOB_STATES) - 1)
#define FINISHED (1u << ES_JOB_DONE | 1u << ES_JOB_FAILED | 1u << ES_JOB_CANCELLED)

/* A state mask as the names of its states. */
static json_t *state_list(unsigned mask)
{
    json_t *list = json_array();
    for (int s = 0; s < ES_JOB_STATES; s++)
        if (mask & 1u << s)
            json_array_append_new(list, json_string(state_choices[s]));
    return list;
}

/* The values of "state" and of progress "pass". */
static json_t *state_values(void) { return state_list(ALWAYS); }

static json_t *pass_values(void)
{
    json_t *list = json_array();
    for (int i = 0; es_progress_pass_name(i); i++)
        json_array_append_new(list, json_string(es_progress_pass_name(i)));
    return list;
}

static bool is_done(const job_view *v) { return v->j->state == ES_JOB_DONE; }
static json_t *v_id(const job_view *v) { return json_string(v->j->id); }
static json_t *v_state(const job_view *v) { return json_string(state_choices[v->j->state]); }
static json_t *v_url(const job_view *v) { return es_jstr(v->j->url); }
static json_t *v_created(const job_view *v) { return es_jnum(v->jc, "created", v->j->created_unix); }
static json_t *v_elapsed(const job_view *v) { return es_jnum(v->jc, "elapsed_s", v->j->elapsed_s); }
static json_t *v_predicted(const job_view *v) { return es_jnum(v->jc, "predicted_s", v->j->predicted_s); }
static json_t *v_fraction(const job_view *v) { return json_real(v->j->fraction); }
static json_t *v_pass_fraction(const job_view *v) { return json_real(is_done(v) ? 1.0 : v->j->pass_fraction); }
static json_t *v_pass(const job_view *v) { return v->j->pass ? json_string(v->j->pass) : json_null(); }
static json_t *v_estimated(const job_view *v) { return json_boolean(v->j->estimated && !is_done(v)); }
static json_t *v_blocks_done(const job_view *v) { return json_integer((json_int_t)v->j->blocks_done); }
static json_t *v_blocks(const job_view *v) { return json_integer((json_int_t)v->j->blocks); }
static json_t *v_passes(const job_view *v) { return json_integer((json_int_t)v->j->passes); }

static json_t *v_running(const job_view *v) { return es_jnum(v->jc, "running_s", v->j->running_s); }

static json_t *v_expires(const job_view *v) { return es_jnum(v->jc, "expires_in_s", v->j->expires_in_s); }

/* The problem document of a failed job (null if its reply was not JSON). */
static json_t *v_error(const job_view *v)
{
    json_t *problem = json_loadb(v->j->error ? v->j->error : "", v->j->error_len, 0, NULL);
    return problem ? problem : json_null();
}

static const job_field progress_fields[] = {
    {"fraction", "number", false, ALWAYS, v_fraction, NULL, NULL, NULL,
     "The whole computation's share done, across its passes: each pass weighted by the cost model's predicted "
     "share of its time (products and rendering, which report nothing, are the rest, so it stays below 1 until "
     "done); it never goes back. 1 when done."},
    {"pass_fraction", "number", false, ALWAYS, v_pass_fraction, NULL, NULL, NULL,
     "blocks_done / blocks of the current pass (1 when done); for the estimated pass lapack, the time it has run "
     "over its predicted seconds, at most 0.9 until it ends."},
    {"pass", "string", true, ALWAYS, v_pass, NULL, pass_values, NULL,
     "The pass running now (null before the first)."},
    {"estimated", "boolean", false, ALWAYS, v_estimated, NULL, NULL, NULL,
     "Whether pass_fraction (and the running pass's part of fraction) is estimated from the elapsed time: true "
     "during lapack (dgesdd, dgebrd + dbdsdc, dsyevr), which reports no blocks."},
    {"blocks_done", "integer", false, ALWAYS, v_blocks_done, NULL, NULL, NULL, "Blocks of the current pass done."},
    {"blocks", "integer", false, ALWAYS, v_blocks, NULL, NULL, NULL, "Blocks of the current pass."},
    {"passes", "integer", false, ALWAYS, v_passes, NULL, NULL, NULL, "Passes started so far."},
    {0},
};

static const job_field job_fields[] = {
    {"id", "string", false, ALWAYS, v_id, NULL, NULL, NULL, "The job's id (128 random bits, 32 hex digits: a capability of its owner): GET /v1/jobs/{id}, the 202's Location."},
    {"state", "string", false, ALWAYS, v_state, NULL, state_values, NULL,
     "queued, running, then done (GET /v1/jobs/{id} answers 303 to the result), failed (error holds the "
     "problem) or cancelled."},
    {"url", "string", false, ALWAYS, v_url, NULL, NULL, NULL, "The request: its path and query (the result's URL)."},
    {"created", "number", false, ALWAYS, v_created, NULL, NULL, NULL, "Unix time."},
    {"elapsed_s", "number", false, ALWAYS, v_elapsed, NULL, NULL, NULL, "Since it was created (until it finished)."},
    {"running_s", "number", false, ALWAYS, v_running, NULL, NULL, NULL,
     "Since its computation started (until it finished)."},
    {"predicted_s", "number", false, ALWAYS, v_predicted, NULL, NULL, NULL,
     "The cost model's prediction of its compute time on this machine."},
    {"progress", "object", false, ALWAYS, NULL, progress_fields, NULL, NULL,
     "How far the computation is (blocks of its current pass: the TSQR, Gram, projection, ... loops)."},
    {"result", "string", false, 1u << ES_JOB_DONE, v_url, NULL, NULL, NULL,
     "The result's URL (also the 303's Location), which answers with the reply the job kept."},
    {"error", "object", true, 1u << ES_JOB_FAILED, v_error, NULL, NULL, "problem",
     "The problem document the request would have answered synchronously."},
    {"expires_in_s", "number", false, FINISHED, v_expires, NULL, NULL, NULL,
     "Seconds until it is forgotten (limits.job_ttl_s after it finished)."},
    {0},
};

/* The members of table present in v's state, as a JSON object. */
static json_t *render_fields(const job_field *f, const job_view *v)
{
    json_t *o = json_object();
    for (; f->name; f++)
        if (f->states & 1u << v->j->state)
            json_object_set_new(o, f->name, f->members ? render_fields(f->members, v) : f->value(v));
    return o;
}

/* See jobs.h. */
json_t *es_job_render(const es_job_view *j)
{
    es_jctx jc = {0};
    return render_fields(job_fields, &(job_view){.j = j, .jc = &jc});
}

/* A field table as the dump describes it. */
static json_t *describe_fields(const job_field *f)
{
    json_t *list = json_array();
    for (; f->name; f++) {
        json_t *o = json_pack("{s:s, s:s, s:b, s:o, s:s}", "name", f->name, "type", f->type, "nullable", f->nullable,
                              "states", state_list(f->states), "description", f->doc);
        if (f->choices)
            json_object_set_new(o, "enum", f->choices());
        if (f->schema)
            json_object_set_new(o, "schema", json_string(f->schema));
        if (f->members)
            json_object_set_new(o, "members", describe_fields(f->members));
        json_array_append_new(list, o);
    }
    return list;
}

/* See jobs.h. */
json_t *es_job_describe(void)
{
    return json_pack("{s:o, s:o, s:s, s:o}", "states", state_list(ALWAYS), "finished", state_list(FINISHED),
                     "listing", ES_JOBS_LISTING, "fields", describe_fields(job_fields));
}
