/* Converted copies in a cache directory (es_source_open_cached): a tensor of
 * an unchanged, settled file is mapped from its copy with the same values and
 * provenance; float32 tensors are kept as floats (.f32), float64 ones as
 * doubles (.f64); a file changed (or changed too recently to tell) is read
 * again; corrupt, truncated, foreign and older-format copies and records are
 * rejected, deleted and rebuilt, never used. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check_main.h"
#include "embedscope/store.h"
#include "store/crafted.h"
#include "store/internal.h"
#include "tmpdir.h"

/* Four files made once and left to settle (ES_TC_SETTLE_NS), one per test,
 * and the same 2 x 3 .npy bytes in C and in Fortran order. */
static crafted files[4], npy_c, npy_f, npy_in[6];

static void make_settled_files(void)
{
    for (size_t i = 0; i < 4; i++)
        files[i] = write_two_tensor_safetensors();
    npy_c = write_npy_2x3(false);
    npy_f = write_npy_2x3(true);
    for (size_t i = 0; i < sizeof npy_in / sizeof *npy_in; i++)
        npy_in[i] = write_npy_2x3(false);
    usleep((useconds_t)(ES_TC_SETTLE_NS / 1000) + 200000);
}

static void remove_files(void)
{
    for (size_t i = 0; i < 4; i++)
        unlink(files[i].path);
    unlink(npy_c.path);
    unlink(npy_f.path);
    for (size_t i = 0; i < sizeof npy_in / sizeof *npy_in; i++)
        unlink(npy_in[i].path);
}

/* The paths of dir's files ending in suffix (at most 8), sorted; returns the count. */
static size_t files_with(const char *dir, const char *suffix, char *out[8])
{
    DIR *d = opendir(dir);
    size_t n = 0, k = strlen(suffix);
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > k && strcmp(e->d_name + len - k, suffix) == 0 && n < 8)
            out[n++] = es_asprintf("%s/%s", dir, e->d_name);
    }
    closedir(d);
    return n;
}

static size_t count_files(const char *dir, const char *suffix)
{
    char *names[8];
    size_t n = files_with(dir, suffix, names);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    return n;
}

/* Load "w" and "b" from path through cache_dir; returns the source's cache hits. */
static size_t load_both(const char *path, const char *dir, es_matrix **w, es_matrix **b)
{
    es_source *s;
    es_err err = {0};
    ck_assert_msg(es_source_open_cached(path, dir, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(es_source_load_tensor(s, "t/w", "w", ES_AXIS_ROWS, "two.safetensors", w, &err) == 0, "%s",
                  err.message);
    ck_assert_msg(es_source_load_tensor(s, "t/b", "b", ES_AXIS_COLUMNS, NULL, b, &err) == 0, "%s", err.message);
    size_t hits = es_source_cache_hits(s);
    es_source_free(s);
    ck_assert_int_eq(es_matrix_sha_wait(*w), ES_SHA_KNOWN);
    ck_assert_int_eq(es_matrix_sha_wait(*b), ES_SHA_KNOWN);
    return hits;
}

/* Load the .npy at path through cache_dir; returns the source's cache hits. */
static size_t load_npy_in(const char *path, const char *dir, es_matrix **m, size_t *in_place);
static size_t load_npy(const char *path, const char *dir, es_matrix **m)
{
    size_t in_place;
    return load_npy_in(path, dir, m, &in_place);
}

/* a and b: the same load (expect_same_load), and the same axis, source name,
 * stored shape and identity but for the name of the data (one mapped in place
 * without a record is named by its file's stamp while it lives, es_matrix_data_id). */
static void expect_same(const es_matrix *a, const es_matrix *b)
{
    expect_same_load(a, b);
    ck_assert_int_eq(a->model_axis, b->model_axis);
    ck_assert_str_eq(a->prov.source, b->prov.source);
    ck_assert_uint_eq(a->prov.shape[0], b->prov.shape[0]);
    ck_assert_uint_eq(a->prov.shape[1], b->prov.shape[1]);
    char *ia = es_matrix_identity(a), *ib = es_matrix_identity(b);
    ck_assert_str_eq(strchr(ia, '#'), strchr(ib, '#'));
    free(ia);
    free(ib);
}

static void release2(es_matrix *a, es_matrix *b)
{
    es_matrix_release(a);
    es_matrix_release(b);
}

/* Flip one byte at offset `at` from the end (at > 0) or the middle (at == 0). */
static void flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, at ? size - at : size / 2, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at ? size - at : size / 2, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

/* Overwrite the file's last n bytes with data, in place: same size (and
 * inode), other content. */
static void overwrite_tail(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, -(long)n, SEEK_END), 0);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

/* Overwrite the file's last 4 bytes (b's last value) with x: same size, other bytes. */
static void set_last_float(const char *path, float x)
{
    overwrite_tail(path, &x, sizeof x);
}

/* The whole file at path, its size in *len. Caller frees. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    unsigned char *p = es_malloc(*len);
    ck_assert_uint_eq(fread(p, 1, *len, f), *len);
    fclose(f);
    return p;
}

/* Header fields of a checked file (host order, tcache.c): the 8-byte magic,
 * the u32 format version, the u32 kind, the u64 key length and the
 * u64 payload length; a trailer of u32 crc32 and u32 zero ends the file. */
enum { AT_MAGIC = 0, AT_VERSION = 8, AT_KIND = 12, AT_PAYLOAD_LEN = 24, TRAILER = 8 };
enum { KIND_DOUBLES = 2, KIND_FLOATS = 3 }; /* the kinds of copies */

/* Write the checked file p (len bytes) to path with a valid trailing crc32. */
static void write_with_crc(const char *path, unsigned char *p, size_t len)
{
    uint32_t crc = (uint32_t)crc32_z(0, p, len - TRAILER);
    memcpy(p + len - TRAILER, &crc, sizeof crc);
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(p, 1, len, f), len);
    fclose(f);
}

/* Rewrite the u32 header field at `at` of the checked file at path (the
 * format version, or the kind) to value, with a valid crc32. */
static void set_field(const char *path, size_t at, uint32_t value)
{
    size_t len;
    unsigned char *p = slurp(path, &len);
    memcpy(p + at, &value, sizeof value);
    write_with_crc(path, p, len);
    free(p);
}

/* The u32 header field at `at` of a checked file. */
static uint32_t field(const char *path, size_t at)
{
    size_t len;
    unsigned char *p = slurp(path, &len);
    uint32_t v;
    memcpy(&v, p + at, sizeof v);
    free(p);
    return v;
}

/* Set the field at `at` of every file of dir ending in suffix to value; returns how many. */
static size_t set_fields(const char *dir, const char *suffix, size_t at, uint32_t value)
{
    char *names[8];
    size_t n = files_with(dir, suffix, names);
    for (size_t i = 0; i < n; i++) {
        set_field(names[i], at, value);
        free(names[i]);
    }
    return n;
}

/* Whether there are files of dir ending in suffix and the field at `at` of each is value. */
static bool all_with_field(const char *dir, const char *suffix, size_t at, uint32_t value)
{
    char *names[8];
    size_t n = files_with(dir, suffix, names);
    bool all = n > 0;
    for (size_t i = 0; i < n; i++) {
        all = all && field(names[i], at) == value;
        free(names[i]);
    }
    return all;
}

/* Rewrite the checked file at path with its payload delta bytes longer (zeros)
 * or shorter, its header's payload length and its crc32 to match: whole, of
 * its kind and key, but not the size its record says. */
static void resize_payload(const char *path, long delta)
{
    size_t len;
    unsigned char *p = slurp(path, &len);
    uint64_t plen, resized;
    memcpy(&plen, p + AT_PAYLOAD_LEN, sizeof plen);
    resized = (uint64_t)((long)plen + delta);
    size_t before = len - TRAILER - (size_t)plen, n = before + (size_t)resized + TRAILER; /* header and key */
    unsigned char *q = es_calloc(n, 1);
    memcpy(q, p, before + (size_t)(resized < plen ? resized : plen));
    memcpy(q + AT_PAYLOAD_LEN, &resized, sizeof resized);
    write_with_crc(path, q, n);
    free(q);
    free(p);
}

START_TEST(unchanged_file_maps_its_copy)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *w0, *b0, *w1, *b1, *w2, *b2;
    ck_assert_uint_eq(load_both(files[0].path, NULL, &w0, &b0), 0); /* no cache: the reference */
    ck_assert_uint_eq(load_both(files[0].path, dir, &w1, &b1), 0);
    ck_assert_uint_eq(count_files(dir, ".f32"), 2); /* float32 tensors: float copies */
    ck_assert_uint_eq(count_files(dir, ".f64"), 0);
    ck_assert_uint_eq(count_files(dir, ".tensor"), 2);
    ck_assert_uint_eq(count_files(dir, ".tmp"), 0);
    ck_assert_uint_eq(load_both(files[0].path, dir, &w2, &b2), 2); /* both mapped */
    expect_same(w0, w1);
    expect_same(b0, b1);
    expect_same(w0, w2);
    expect_same(b0, b2);
    ck_assert(es_matrix_at(w2, 1, 2) == 5.5);
    ck_assert_uint_eq(es_matrix_bytes(w2), 6 * sizeof(float)); /* the map holds floats, not doubles */
    ck_assert_uint_eq(b2->rows, 1); /* rank 1 stays 1 x n */
    release2(w0, b0);
    release2(w1, b1);
    es_matrix *wm = w2;
    es_matrix_release(b2);
    es_test_remove_dir(dir); /* a mapped copy outlives its name */
    ck_assert(es_matrix_at(wm, 0, 0) == 0.5);
    es_matrix_release(wm);
}
END_TEST

START_TEST(changed_file_is_read_again)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *w1, *b1, *w2, *b2, *w3, *b3;
    load_both(files[1].path, dir, &w1, &b1);
    ck_assert_uint_eq(count_files(dir, ".tensor"), 2);
    /* same size, other values: only the stamp (times) tells */
    set_last_float(files[1].path, 100.25f);
    ck_assert_uint_eq(load_both(files[1].path, dir, &w2, &b2), 0);
    ck_assert(es_matrix_at(b2, 0, 2) == 100.25);
    ck_assert_str_ne(es_matrix_sha256(b2), es_matrix_sha256(b1));
    ck_assert_str_ne(es_matrix_file_sha256(w2), es_matrix_file_sha256(w1));
    ck_assert_str_eq(es_matrix_sha256(w2), es_matrix_sha256(w1)); /* w's bytes are unchanged */
    /* changed just now: no record for the new stamp, so it is read again next time */
    ck_assert_uint_eq(count_files(dir, ".tensor"), 2);
    ck_assert_uint_eq(load_both(files[1].path, dir, &w3, &b3), 0);
    ck_assert(es_matrix_at(b3, 0, 2) == 100.25);
    release2(w1, b1);
    release2(w2, b2);
    release2(w3, b3);
    es_test_remove_dir(dir);
}
END_TEST

/* Changed with its modification time put back (cp -p, rsync -t, tar do): the
 * status-change time still tells, so the file is read again. */
START_TEST(changed_file_with_its_old_mtime_is_read_again)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *w1, *b1, *w2, *b2;
    ck_assert_uint_eq(load_both(files[3].path, dir, &w1, &b1), 0);
    ck_assert_uint_eq(count_files(dir, ".tensor"), 2);
    struct stat st;
    ck_assert_int_eq(stat(files[3].path, &st), 0);
    set_last_float(files[3].path, 100.25f);
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    ck_assert_int_eq(utimensat(AT_FDCWD, files[3].path, times, 0), 0);
    ck_assert_uint_eq(load_both(files[3].path, dir, &w2, &b2), 0);
    ck_assert(es_matrix_at(b2, 0, 2) == 100.25);
    release2(w1, b1);
    release2(w2, b2);
    es_test_remove_dir(dir);
}
END_TEST

START_TEST(bad_copies_are_rebuilt_never_used)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *w0, *b0, *w, *b;
    load_both(files[2].path, dir, &w0, &b0);
    char *copy[8], *rec[8];
    ck_assert_uint_eq(files_with(dir, ".f32", copy), 2);
    ck_assert_uint_eq(files_with(dir, ".tensor", rec), 2);

    flip_byte(copy[0], 0); /* a corrupt copy */
    ck_assert_int_eq(truncate(copy[1], 40), 0); /* a truncated copy */
    ck_assert_uint_eq(load_both(files[2].path, dir, &w, &b), 0);
    expect_same(w0, w);
    expect_same(b0, b);
    release2(w, b);
    ck_assert_uint_eq(count_files(dir, ".f32"), 2); /* rewritten */
    ck_assert_uint_eq(load_both(files[2].path, dir, &w, &b), 2);
    expect_same(w0, w);
    release2(w, b);

    flip_byte(rec[0], 6); /* the record's checksum */
    ck_assert_int_eq(truncate(rec[1], 0), 0); /* an empty record */
    ck_assert_uint_eq(load_both(files[2].path, dir, &w, &b), 0);
    expect_same(w0, w);
    expect_same(b0, b);
    release2(w, b);
    ck_assert_uint_eq(load_both(files[2].path, dir, &w, &b), 2); /* both rebuilt */
    release2(w, b);

    /* a whole file under another's name: foreign, refused */
    char *cmd = es_asprintf("cp %s %s", copy[0], copy[1]);
    ck_assert_int_eq(system(cmd), 0);
    free(cmd);
    ck_assert_uint_eq(load_both(files[2].path, dir, &w, &b), 1);
    expect_same(w0, w);
    expect_same(b0, b);
    release2(w, b);
    ck_assert_uint_eq(load_both(files[2].path, dir, &w, &b), 2);
    release2(w, b);

    for (size_t i = 0; i < 2; i++) {
        free(copy[i]);
        free(rec[i]);
    }
    release2(w0, b0);
    es_test_remove_dir(dir);
}
END_TEST

/* The same tensor bytes in C and in Fortran order (one tensor sha256) are two
 * matrices: the Fortran-order one keeps its converted copy, the C-order one
 * (little-endian float64) borrows the file's bytes and has a record only. */
START_TEST(storage_order_has_its_own_copy)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *c0, *f0, *c1, *f1, *f2;
    ck_assert_uint_eq(load_npy(npy_c.path, NULL, &c0), 0);
    ck_assert_uint_eq(load_npy(npy_f.path, NULL, &f0), 0);
    ck_assert_str_eq(es_matrix_sha256(c0), es_matrix_sha256(f0));
    ck_assert(es_matrix_at(c0, 0, 1) == 1.5 && es_matrix_at(f0, 0, 1) == 2.5);
    ck_assert_uint_eq(load_npy(npy_c.path, dir, &c1), 0);
    ck_assert_uint_eq(load_npy(npy_f.path, dir, &f1), 0);
    ck_assert_uint_eq(count_files(dir, ".f64"), 1); /* C order is borrowed from the file: no copy */
    ck_assert_uint_eq(count_files(dir, ".tensor"), 2);
    ck_assert_uint_eq(load_npy(npy_f.path, dir, &f2), 1); /* mapped */
    expect_same_load(c0, c1);
    expect_same_load(f0, f1);
    expect_same_load(f0, f2);
    es_matrix *all[] = {c0, f0, c1, f1, f2};
    for (size_t i = 0; i < 5; i++)
        es_matrix_release(all[i]);
    es_test_remove_dir(dir);
}
END_TEST

/* Load the .npy at path through dir; its cache hits, and in *in_place the
 * loads that borrow the file's bytes. */
static size_t load_npy_in(const char *path, const char *dir, es_matrix **m, size_t *in_place)
{
    es_source *s;
    es_err err = {0};
    ck_assert_msg(es_source_open_cached(path, dir, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(es_source_load_tensor(s, "t/x", NULL, ES_AXIS_ROWS, NULL, m, &err) == 0, "%s", err.message);
    size_t hits = es_source_cache_hits(s);
    *in_place = es_source_in_place(s);
    es_source_free(s); /* starts the hashing of a tensor mapped in place */
    ck_assert_int_eq(es_matrix_sha_wait(*m), ES_SHA_KNOWN); /* then its record is written */
    return hits;
}

/* The sha256 of the 48 tensor bytes at the end of a 2 x 3 '<f8' .npy. */
static void tensor_sha(const char *path, char out[65])
{
    size_t len;
    unsigned char *p = slurp(path, &len);
    es_sha256_hex(p + len - 48, 48, out);
    free(p);
}

/* Overwrite the last double of path with x: same size, other bytes. */
static void set_last_double(const char *path, double x)
{
    overwrite_tail(path, &x, sizeof x);
}

/* Overwrite the last double of path with x in place, and move its
 * modification time 5 s on (another whatever the clock's resolution). */
static void rewrite_last_double(const char *path, double x)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    set_last_double(path, x);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    times[1].tv_sec += 5;
    ck_assert_int_eq(utimensat(AT_FDCWD, path, times, 0), 0);
}

/* A little-endian float64 C-order tensor keeps a record and no copy; the next
 * load of the unchanged file maps it in place with the record's sha256s (a
 * cache hit: not hashed again). */
START_TEST(in_place_record_without_copy)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *m0, *m1, *ref;
    size_t in_place;
    ck_assert_uint_eq(load_npy(npy_in[0].path, NULL, &ref), 0);
    ck_assert_uint_eq(load_npy_in(npy_in[0].path, dir, &m0, &in_place), 0);
    ck_assert_uint_eq(in_place, 1);
    ck_assert_uint_eq(count_files(dir, ".tensor"), 1);
    ck_assert_uint_eq(count_files(dir, ".f64"), 0);
    ck_assert_uint_eq(load_npy_in(npy_in[0].path, dir, &m1, &in_place), 1);
    ck_assert_uint_eq(in_place, 1);
    expect_same(ref, m0);
    expect_same(ref, m1);
    char want[65];
    tensor_sha(npy_in[0].path, want);
    ck_assert_str_eq(es_matrix_sha256(m1), want);
    ck_assert(es_matrix_at(m1, 1, 2) == 5.5);
    es_matrix *all[] = {ref, m0, m1};
    for (size_t i = 0; i < 3; i++)
        es_matrix_release(all[i]);
    es_test_remove_dir(dir);
}
END_TEST

/* The same size, other bytes and another modification time: not the record's
 * file, so it is hashed again (a record trusted by path or size alone would
 * serve the old sha256 with the new values). */
START_TEST(in_place_changed_file_is_hashed_again)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *m0, *m1;
    size_t in_place;
    ck_assert_uint_eq(load_npy_in(npy_in[1].path, dir, &m0, &in_place), 0);
    ck_assert_uint_eq(count_files(dir, ".tensor"), 1);
    rewrite_last_double(npy_in[1].path, 100.25);
    ck_assert_uint_eq(load_npy_in(npy_in[1].path, dir, &m1, &in_place), 0);
    ck_assert_uint_eq(in_place, 1);
    ck_assert(es_matrix_at(m1, 1, 2) == 100.25);
    char want[65];
    tensor_sha(npy_in[1].path, want);
    ck_assert_str_eq(es_matrix_sha256(m1), want);
    ck_assert_str_ne(es_matrix_sha256(m1), es_matrix_sha256(m0));
    ck_assert_str_ne(es_matrix_file_sha256(m1), es_matrix_file_sha256(m0));
    es_matrix_release(m0);
    es_matrix_release(m1);
    es_test_remove_dir(dir);
}
END_TEST

/* Replaced by rename with a new file of the same size and modification time
 * (another inode): hashed again; the matrix loaded before keeps the old
 * file's bytes (its map holds the old inode). */
START_TEST(in_place_replaced_file_is_hashed_again)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *m0, *m1;
    size_t in_place;
    ck_assert_uint_eq(load_npy_in(npy_in[2].path, dir, &m0, &in_place), 0);
    struct stat st, st2;
    ck_assert_int_eq(stat(npy_in[2].path, &st), 0);
    crafted repl = write_npy_2x3(false);
    set_last_double(repl.path, -7.75);
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    ck_assert_int_eq(utimensat(AT_FDCWD, repl.path, times, 0), 0);
    ck_assert_int_eq(rename(repl.path, npy_in[2].path), 0);
    ck_assert_int_eq(stat(npy_in[2].path, &st2), 0);
    ck_assert_uint_ne(st2.st_ino, st.st_ino);
    ck_assert_int_eq(st2.st_size, st.st_size);
    ck_assert_int_eq(st2.st_mtim.tv_sec, st.st_mtim.tv_sec);
    ck_assert_uint_eq(load_npy_in(npy_in[2].path, dir, &m1, &in_place), 0);
    ck_assert(es_matrix_at(m1, 1, 2) == -7.75);
    ck_assert(es_matrix_at(m0, 1, 2) == 5.5);
    char want[65];
    tensor_sha(npy_in[2].path, want);
    ck_assert_str_eq(es_matrix_sha256(m1), want);
    ck_assert_str_ne(es_matrix_sha256(m1), es_matrix_sha256(m0));
    es_matrix_release(m0);
    es_matrix_release(m1);
    es_test_remove_dir(dir);
}
END_TEST

/* ---------------------------------------------------------------- hashed after loading */

/* A hold for the background hashing (the ES_TEST_HASH_HOLD hook): while its
 * file exists no job hashes, so what a test sees before it releases the hold
 * does not depend on how fast anything runs. Returns the file's path. */
static char *hold_hashing(const char *dir)
{
    char *hold = es_asprintf("%s/hold", dir);
    FILE *f = fopen(hold, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(setenv("ES_TEST_HASH_HOLD", hold, 1), 0);
    return hold;
}

/* Load the .npy at path in place through dir while hashing is held: served at
 * once, its sha256s not known, its data named by the file's stamp, no record
 * yet. */
static es_matrix *load_held(const char *path, const char *dir)
{
    es_matrix *m;
    size_t in_place;
    es_source *s;
    es_err err = {0};
    ck_assert_msg(es_source_open_cached(path, dir, &s, &err) == 0, "%s", err.message);
    ck_assert_msg(es_source_load_tensor(s, "t/x", NULL, ES_AXIS_ROWS, NULL, &m, &err) == 0, "%s", err.message);
    in_place = es_source_in_place(s);
    es_source_free(s); /* the job starts, and waits on the hold */
    ck_assert_uint_eq(in_place, 1);
    ck_assert_int_eq(es_matrix_sha_state(m), ES_SHA_COMPUTING);
    ck_assert_ptr_null(es_matrix_sha256(m));
    ck_assert_ptr_null(es_matrix_file_sha256(m));
    ck_assert_str_eq(m->prov.sha256, "");
    ck_assert(strncmp(es_matrix_data_id(m), ES_DATA_ID_PROVISIONAL, strlen(ES_DATA_ID_PROVISIONAL)) == 0);
    ck_assert_uint_eq(count_files(dir, ".tensor"), 0);
    return m;
}

/* A tensor mapped in place is served before its sha256 is known: its values
 * are there at once, the hash and record come when the hold is released; its
 * identity stays the provisional one (what was computed under it stays valid)
 * and the renamed copy a reload keeps sees the same hash; the next load reads
 * the record. Fails when hashing is done inline again (the state is KNOWN at
 * once) or the record is not written by the job. */
START_TEST(in_place_hash_comes_after_loading)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    char *hold = hold_hashing(dir);
    es_matrix *m = load_held(npy_in[3].path, dir);
    ck_assert(es_matrix_at(m, 1, 2) == 5.5 && es_matrix_at(m, 0, 0) == 0.5);
    es_matrix *kept = es_matrix_renamed(m, "t/kept");
    char *before = es_matrix_identity(m);
    ck_assert_int_eq(unlink(hold), 0);
    ck_assert_int_eq(es_matrix_sha_wait(m), ES_SHA_KNOWN);
    char want[65], file_want[65];
    tensor_sha(npy_in[3].path, want);
    size_t len;
    unsigned char *whole = slurp(npy_in[3].path, &len);
    es_sha256_hex(whole, len, file_want);
    free(whole);
    ck_assert_str_eq(es_matrix_sha256(m), want);
    ck_assert_str_eq(es_matrix_file_sha256(m), file_want);
    ck_assert_str_eq(es_matrix_sha256(kept), want);
    char *after = es_matrix_identity(m);
    ck_assert_str_eq(after, before);
    ck_assert_uint_eq(count_files(dir, ".tensor"), 1);
    es_matrix *again;
    size_t in_place;
    ck_assert_uint_eq(load_npy_in(npy_in[3].path, dir, &again, &in_place), 1); /* from the record */
    ck_assert_ptr_null(again->digest);
    ck_assert_str_eq(es_matrix_sha256(again), want);
    ck_assert_str_eq(es_matrix_file_sha256(again), file_want);
    free(before);
    free(after);
    free(hold);
    es_matrix_release(kept);
    es_matrix_release(m);
    es_matrix_release(again);
    es_test_remove_dir(dir);
}
END_TEST

/* Written in place while it is hashed (other bytes, another modification
 * time): no sha256 is published or recorded, the state says why, and the data
 * gets another name, so nothing computed from the earlier bytes is served
 * again. Fails when the stamp is not taken again after hashing (the mixed
 * bytes' hash is published and recorded). */
START_TEST(in_place_changed_while_hashed_gets_no_hash)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    char *hold = hold_hashing(dir);
    es_matrix *m = load_held(npy_in[4].path, dir);
    char *before = es_matrix_identity(m);
    rewrite_last_double(npy_in[4].path, 100.25);
    ck_assert_int_eq(unlink(hold), 0);
    ck_assert_int_eq(es_matrix_sha_wait(m), ES_SHA_FAILED);
    ck_assert_ptr_null(es_matrix_sha256(m));
    ck_assert_ptr_null(es_matrix_file_sha256(m));
    ck_assert_ptr_nonnull(strstr(es_matrix_sha_error(m), "changed while its sha256 was computed"));
    char *after = es_matrix_identity(m);
    ck_assert_str_ne(after, before);
    ck_assert_uint_eq(count_files(dir, ".tensor"), 0);
    free(before);
    free(after);
    free(hold);
    es_matrix_release(m);
    es_test_remove_dir(dir);
}
END_TEST

/* Released before its job starts (a configuration that failed to load, or
 * was replaced): the job reads nothing and writes no record. Fails when the
 * job hashes what no matrix holds (its record appears). */
START_TEST(in_place_released_before_hashing_is_not_hashed)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    char *hold = hold_hashing(dir);
    es_matrix *m = load_held(npy_in[3].path, dir);
    es_matrix_release(m);
    ck_assert_int_eq(unlink(hold), 0);
    es_digests_wait();
    ck_assert_uint_eq(count_files(dir, ".tensor"), 0);
    free(hold);
    es_test_remove_dir(dir);
}
END_TEST

/* Replaced by rename while it is hashed (the documented way): the inode the
 * daemon maps keeps its bytes, so their sha256 is known (the old file's; its
 * status-change time moved when the rename unlinked it, its bytes did not),
 * and the next load hashes the new file. Fails when any ctime change fails
 * the hash. */
START_TEST(in_place_renamed_over_while_hashed_keeps_its_hash)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    char *hold = hold_hashing(dir);
    char want[65];
    tensor_sha(npy_in[5].path, want);
    es_matrix *m = load_held(npy_in[5].path, dir);
    crafted repl = write_npy_2x3(false);
    set_last_double(repl.path, -7.75);
    ck_assert_int_eq(rename(repl.path, npy_in[5].path), 0);
    ck_assert_int_eq(unlink(hold), 0);
    ck_assert_int_eq(es_matrix_sha_wait(m), ES_SHA_KNOWN);
    ck_assert_str_eq(es_matrix_sha256(m), want);
    ck_assert(es_matrix_at(m, 1, 2) == 5.5);
    es_matrix *next;
    size_t in_place;
    ck_assert_int_eq(unsetenv("ES_TEST_HASH_HOLD"), 0);
    ck_assert_uint_eq(load_npy_in(npy_in[5].path, dir, &next, &in_place), 0);
    ck_assert(es_matrix_at(next, 1, 2) == -7.75);
    ck_assert_str_ne(es_matrix_sha256(next), want);
    free(hold);
    es_matrix_release(m);
    es_matrix_release(next);
    es_test_remove_dir(dir);
}
END_TEST

/* The float copy holds the source's float32 bytes as they are: w's six floats
 * (0.5 .. 5.5) in 24 bytes, in a file of header, key, payload and trailer. */
START_TEST(float32_copy_holds_the_floats)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *w, *b;
    load_both(files[0].path, dir, &w, &b);
    release2(w, b);
    float want[6];
    for (int i = 0; i < 6; i++)
        want[i] = (float)i + 0.5f;
    char *names[8];
    size_t n = files_with(dir, ".f32", names), found = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        unsigned char *p = slurp(names[i], &len);
        if (memmem(p, len, want, sizeof want)) {
            found++;
            ck_assert_uint_lt(len, 32 + 256 + sizeof want + 8); /* floats, not doubles */
        }
        free(p);
        free(names[i]);
    }
    ck_assert_uint_eq(found, 1);
    es_test_remove_dir(dir);
}
END_TEST

/* A load of files[0] through dir with `hits` cache hits that serves w0's and b0's values. */
static void expect_load(const char *dir, size_t hits, const es_matrix *w0, const es_matrix *b0)
{
    es_matrix *w, *b;
    ck_assert_uint_eq(load_both(files[0].path, dir, &w, &b), hits);
    expect_same(w0, w);
    expect_same(b0, b);
    release2(w, b);
}

/* After files[0]'s files ending in suffix were set to format 1: a load refuses
 * them (no cache hit) and serves the source's values, the files are rewritten
 * in format 2, and the next load maps both tensors. */
static void expect_rebuilt(const char *dir, const char *suffix, const es_matrix *w0, const es_matrix *b0)
{
    expect_load(dir, 0, w0, b0);
    ck_assert(all_with_field(dir, suffix, AT_VERSION, 2));
    expect_load(dir, 2, w0, b0);
}

/* Files of the previous format (1, every tensor as doubles) lie under the
 * names the current one looks up: refused as foreign, deleted, rebuilt in the
 * current format, then used; never served. */
START_TEST(older_format_files_are_rebuilt)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *w0, *b0, *w, *b;
    load_both(files[0].path, NULL, &w0, &b0);
    ck_assert_uint_eq(load_both(files[0].path, dir, &w, &b), 0);
    release2(w, b);
    ck_assert(all_with_field(dir, ".tensor", AT_VERSION, 2) && all_with_field(dir, ".f32", AT_VERSION, 2));

    ck_assert_uint_eq(set_fields(dir, ".f32", AT_VERSION, 1), 2);
    expect_rebuilt(dir, ".f32", w0, b0);
    ck_assert_uint_eq(set_fields(dir, ".tensor", AT_VERSION, 1), 2);
    expect_rebuilt(dir, ".tensor", w0, b0);
    /* an upgraded cache_dir: records and copies of format 1 are all rewritten at the first start */
    ck_assert_uint_eq(set_fields(dir, ".tensor", AT_VERSION, 1) + set_fields(dir, ".f32", AT_VERSION, 1), 4);
    expect_rebuilt(dir, ".f32", w0, b0);
    ck_assert(all_with_field(dir, ".tensor", AT_VERSION, 2));
    release2(w0, b0);
    es_test_remove_dir(dir);
}
END_TEST

/* The doubles format 1 kept of a float32 tensor (named, as then, from the
 * tensor's sha256, dtype, order and shape) are deleted when its floats are
 * written: an upgraded cache_dir does not keep both. */
START_TEST(format1_doubles_of_float_tensors_are_deleted)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *w0, *b0, *w, *b;
    load_both(files[0].path, NULL, &w0, &b0);
    const struct { const es_matrix *m; const char *shape; } old[] = {{w0, "2x3"}, {b0, "3x1"}};
    for (size_t i = 0; i < 2; i++) {
        char *text = es_asprintf("embedscope-f64-v1\n%s F32 C %s", es_matrix_sha256(old[i].m), old[i].shape), hex[65];
        es_sha256_hex(text, strlen(text), hex);
        char *path = es_asprintf("%s/%s.f64", dir, hex);
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        fputs("format 1 doubles", f);
        fclose(f);
        free(text);
        free(path);
    }
    ck_assert_uint_eq(count_files(dir, ".f64"), 2);
    load_both(files[0].path, dir, &w, &b);
    ck_assert_uint_eq(count_files(dir, ".f64"), 0);
    ck_assert_uint_eq(count_files(dir, ".f32"), 2);
    release2(w, b);
    release2(w0, b0);
    es_test_remove_dir(dir);
}
END_TEST

/* Damage to files[0]'s two float copies in dir (paths copy[0..2)) that
 * leaves each file whole, its header and checksum consistent, yet not to be
 * used. The u32 header field at `at` set to value with the records gone, so
 * that no lookup maps the copies first: the load that writes the records must
 * rewrite the copies too, as for an older format. */
static void header_without_records(const char *dir, char *const copy[2], size_t at, uint32_t value)
{
    char *rec[8];
    ck_assert_uint_eq(files_with(dir, ".tensor", rec), 2);
    for (size_t i = 0; i < 2; i++) {
        set_field(copy[i], at, value);
        ck_assert_int_eq(unlink(rec[i]), 0);
        free(rec[i]);
    }
}

/* Another kind: doubles under a .f32 name. */
static void other_kind(const char *dir, char *const copy[2])
{
    header_without_records(dir, copy, AT_KIND, KIND_DOUBLES);
}

/* Not ours: the magic's first four bytes "ESTC" read "JUNK". */
static void other_magic(const char *dir, char *const copy[2])
{
    header_without_records(dir, copy, AT_MAGIC, 0x4b4e554a);
}

/* One float more and one float less than the records' rows x cols. */
static void wrong_sizes(const char *dir, char *const copy[2])
{
    (void)dir;
    resize_payload(copy[0], (long)sizeof(float));
    resize_payload(copy[1], -(long)sizeof(float));
}

static void (*const damages[])(const char *dir, char *const copy[2]) = {other_kind, other_magic, wrong_sizes};

/* Whole but wrong copies: the next load serves the source's values with no
 * cache hit and leaves float copies of the current kind, mapped by the load
 * after it. */
START_TEST(whole_but_wrong_copies_are_rewritten)
{
    char *dir = es_test_fresh_dir("embedscope-tcache");
    es_matrix *w0, *b0;
    load_both(files[0].path, NULL, &w0, &b0);
    expect_load(dir, 0, w0, b0);
    char *copy[8];
    ck_assert_uint_eq(files_with(dir, ".f32", copy), 2);
    ck_assert(all_with_field(dir, ".f32", AT_KIND, KIND_FLOATS));
    damages[_i](dir, copy);
    free(copy[0]);
    free(copy[1]);
    expect_load(dir, 0, w0, b0);
    ck_assert(all_with_field(dir, ".f32", AT_KIND, KIND_FLOATS));
    expect_load(dir, 2, w0, b0);
    release2(w0, b0);
    es_test_remove_dir(dir);
}
END_TEST

START_TEST(unwritable_cache_dir_still_loads)
{
    es_matrix *w, *b;
    ck_assert_uint_eq(load_both(files[0].path, "/proc/embedscope-no-such-dir", &w, &b), 0);
    ck_assert(es_matrix_at(w, 1, 2) == 5.5);
    release2(w, b);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("tcache");
    TCase *tc = tcase_create("tcache");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, make_settled_files, remove_files);
    tcase_add_test(tc, unchanged_file_maps_its_copy);
    tcase_add_test(tc, changed_file_is_read_again);
    tcase_add_test(tc, changed_file_with_its_old_mtime_is_read_again);
    tcase_add_test(tc, bad_copies_are_rebuilt_never_used);
    tcase_add_test(tc, storage_order_has_its_own_copy);
    tcase_add_test(tc, float32_copy_holds_the_floats);
    tcase_add_test(tc, in_place_record_without_copy);
    tcase_add_test(tc, in_place_changed_file_is_hashed_again);
    tcase_add_test(tc, in_place_replaced_file_is_hashed_again);
    tcase_add_test(tc, in_place_hash_comes_after_loading);
    tcase_add_test(tc, in_place_changed_while_hashed_gets_no_hash);
    tcase_add_test(tc, in_place_renamed_over_while_hashed_keeps_its_hash);
    tcase_add_test(tc, in_place_released_before_hashing_is_not_hashed);
    tcase_add_test(tc, older_format_files_are_rebuilt);
    tcase_add_test(tc, format1_doubles_of_float_tensors_are_deleted);
    tcase_add_loop_test(tc, whole_but_wrong_copies_are_rewritten, 0, sizeof damages / sizeof *damages);
    tcase_add_test(tc, unwritable_cache_dir_still_loads);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
