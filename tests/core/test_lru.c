/* LRU store: find/add/store/touch/remove, recency order, byte budget and
 * evictions, pending entries never evicted, an entry larger than the budget. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "embedscope/core.h"
#include "embedscope/lru.h"

typedef struct item {
    char key[32];
    int freed;          /* set by the destroy callback */
    es_lru_node node;   /* not first, so ES_LRU_ENTRY must subtract the offset */
} item;

/* n items keyed "k0", "k1", ... */
static item *items_new(size_t n)
{
    item *it = es_calloc(n, sizeof *it);
    for (size_t i = 0; i < n; i++)
        snprintf(it[i].key, sizeof it[i].key, "k%zu", i);
    return it;
}

/* Add it as pending, then store it with the given bytes (must fit). */
static void put(es_lru *lru, item *it, size_t bytes)
{
    es_lru_add(lru, &it->node, it->key);
    ck_assert(es_lru_store(lru, &it->node, bytes));
}

/* The item of key, NULL if absent. */
static item *get(es_lru *lru, const char *key)
{
    es_lru_node *n = es_lru_find(lru, key);
    return n ? ES_LRU_ENTRY(n, item, node) : NULL;
}

/* The items freed by the store's free_entry, in order, as indices into `freed_base`. */
static item *freed_base;
static size_t freed_order[16], n_freed;

static void mark_freed(es_lru_node *n)
{
    item *it = ES_LRU_ENTRY(n, item, node);
    it->freed++;
    if (n_freed < 16)
        freed_order[n_freed] = (size_t)(it - freed_base);
    n_freed++;
}

/* A store of max_bytes whose frees are logged against items `its`. */
static void lru_init(es_lru *lru, size_t max_bytes, item *its)
{
    freed_base = its;
    n_freed = 0;
    es_lru_init(lru, max_bytes, mark_freed);
}

/* Evict everything over budget (no holders: every victim is freed); the
 * evicted items' indices, in order, go to order[] (at most 16 frees per store). */
static size_t evict_all(es_lru *lru, size_t *order)
{
    size_t before = n_freed;
    size_t k = es_lru_evict(lru);
    ck_assert_uint_eq(n_freed - before, k);
    ck_assert_uint_le(n_freed, 16);
    for (size_t i = 0; i < k; i++)
        order[i] = freed_order[before + i];
    return k;
}

START_TEST(test_add_find_store_remove)
{
    es_lru lru;
    item *it = items_new(3);
    lru_init(&lru, 1000, it);
    ck_assert_ptr_null(get(&lru, "k0"));
    es_lru_add(&lru, &it[0].node, it[0].key);
    ck_assert_ptr_eq(get(&lru, "k0"), &it[0]);  /* pending is found ... */
    ck_assert(it[0].node.in_table && !it[0].node.stored);
    ck_assert_uint_eq(lru.bytes, 0);             /* ... but not counted */
    ck_assert_uint_eq(lru.entries, 0);
    ck_assert(es_lru_store(&lru, &it[0].node, 100));
    put(&lru, &it[1], 250);
    ck_assert(it[0].node.stored);
    ck_assert_uint_eq(lru.bytes, 350);
    ck_assert_uint_eq(lru.entries, 2);
    ck_assert_ptr_eq(get(&lru, "k1"), &it[1]);
    ck_assert_ptr_null(get(&lru, "k2"));
    ck_assert_ptr_null(get(&lru, "k"));          /* prefixes are different keys */
    es_lru_remove(&lru, &it[0].node);
    ck_assert_ptr_null(get(&lru, "k0"));
    ck_assert(!it[0].node.in_table && !it[0].node.stored);
    ck_assert_uint_eq(lru.bytes, 250);
    ck_assert_uint_eq(lru.entries, 1);
    es_lru_remove(&lru, &it[0].node);            /* already out: no effect */
    ck_assert_uint_eq(lru.bytes, 250);
    es_lru_add(&lru, &it[2].node, it[2].key);    /* a pending one leaves no bytes */
    es_lru_remove(&lru, &it[2].node);
    ck_assert_uint_eq(lru.bytes, 250);
    ck_assert_uint_eq(lru.entries, 1);
    es_lru_add(&lru, &it[0].node, it[0].key);    /* a removed node can come back */
    ck_assert_ptr_eq(get(&lru, "k0"), &it[0]);
    es_lru_destroy(&lru);
    ck_assert_int_eq(it[0].freed + it[1].freed + it[2].freed, 2); /* k0 pending, k1 stored */
    ck_assert_int_eq(it[2].freed, 0);
    free(it);
}
END_TEST

/* Many keys sharing hash chains: each found as itself, then removed one by one. */
START_TEST(test_many_keys)
{
    enum { N = 10000 };
    es_lru lru;
    item *it = items_new(N);
    lru_init(&lru, (size_t)N * 10, it);
    for (size_t i = 0; i < N; i++)
        put(&lru, &it[i], 10);
    ck_assert_uint_eq(lru.entries, N);
    ck_assert_uint_eq(lru.bytes, (size_t)N * 10);
    ck_assert_uint_eq(es_lru_evict(&lru), 0);      /* exactly at the budget: nothing to evict */
    for (size_t i = 0; i < N; i++)
        ck_assert_ptr_eq(get(&lru, it[i].key), &it[i]);
    for (size_t i = 0; i < N; i += 2)
        es_lru_remove(&lru, &it[i].node);
    for (size_t i = 0; i < N; i++)
        ck_assert_ptr_eq(get(&lru, it[i].key), i % 2 ? &it[i] : NULL);
    ck_assert_uint_eq(lru.entries, N / 2);
    ck_assert_uint_eq(lru.bytes, (size_t)N / 2 * 10);
    es_lru_destroy(&lru);
    free(it);
}
END_TEST

/* Over budget, eviction takes the least recently stored or touched first. */
START_TEST(test_lru_order)
{
    es_lru lru;
    item *it = items_new(6);
    lru_init(&lru, 400, it);
    for (size_t i = 0; i < 4; i++)
        put(&lru, &it[i], 100);                  /* recency: 3 2 1 0 */
    es_lru_touch(&lru, &it[0].node);             /* 0 3 2 1 */
    es_lru_touch(&lru, &it[2].node);             /* 2 0 3 1 */
    size_t order[6];
    ck_assert_uint_eq(evict_all(&lru, order), 0);
    put(&lru, &it[4], 150);                      /* 550 > 400: 1 and 3 go (-> 350) */
    ck_assert_uint_eq(evict_all(&lru, order), 2);
    ck_assert_uint_eq(order[0], 1);
    ck_assert_uint_eq(order[1], 3);
    ck_assert_uint_eq(lru.bytes, 350);
    ck_assert_uint_eq(lru.entries, 3);
    es_lru_touch(&lru, &it[0].node);             /* 0 4 2 */
    put(&lru, &it[5], 300);                      /* 5 0 4 2 = 650: 2, 4 go (-> 400) */
    ck_assert_uint_eq(evict_all(&lru, order), 2);
    ck_assert_uint_eq(order[0], 2);
    ck_assert_uint_eq(order[1], 4);
    ck_assert_uint_eq(lru.bytes, 400);
    ck_assert_uint_eq(lru.entries, 2);
    ck_assert_ptr_eq(get(&lru, "k0"), &it[0]);
    ck_assert_ptr_eq(get(&lru, "k5"), &it[5]);
    for (size_t i = 1; i < 5; i++)
        ck_assert_ptr_null(get(&lru, it[i].key));
    es_lru_touch(&lru, &it[1].node);             /* out: no effect */
    ck_assert_uint_eq(lru.entries, 2);
    es_lru_destroy(&lru);
    for (size_t i = 0; i < 6; i++) /* evicted (no holders) or destroyed, once each */
        ck_assert_int_eq(it[i].freed, 1);
    free(it);
}
END_TEST

/* Pending entries (computations in progress) hold no bytes and are never
 * evicted, even when they are the least recently added. */
START_TEST(test_pending_never_evicted)
{
    es_lru lru;
    item *it = items_new(5);
    lru_init(&lru, 200, it);
    es_lru_add(&lru, &it[0].node, it[0].key);    /* pending, oldest */
    put(&lru, &it[1], 100);
    es_lru_add(&lru, &it[2].node, it[2].key);    /* pending, between */
    put(&lru, &it[3], 100);
    es_lru_touch(&lru, &it[0].node);             /* pending: no effect, no crash */
    put(&lru, &it[4], 200);                      /* 400 > 200: 1 and 3 go, not 0 or 2 */
    size_t order[5];
    ck_assert_uint_eq(evict_all(&lru, order), 2);
    ck_assert_uint_eq(order[0], 1);
    ck_assert_uint_eq(order[1], 3);
    ck_assert_ptr_eq(get(&lru, "k0"), &it[0]);
    ck_assert_ptr_eq(get(&lru, "k2"), &it[2]);
    ck_assert_ptr_eq(get(&lru, "k4"), &it[4]);
    ck_assert_uint_eq(lru.bytes, 200);
    ck_assert_uint_eq(lru.entries, 1);
    /* Storing a pending one over budget evicts others, never itself. */
    ck_assert(es_lru_store(&lru, &it[0].node, 150));
    ck_assert_uint_eq(evict_all(&lru, order), 1);
    ck_assert_uint_eq(order[0], 4);
    ck_assert_ptr_eq(get(&lru, "k0"), &it[0]);
    ck_assert_ptr_eq(get(&lru, "k2"), &it[2]);
    ck_assert(!it[2].node.stored);
    es_lru_destroy(&lru);
    ck_assert_int_eq(it[0].freed, 1);
    ck_assert_int_eq(it[2].freed, 1);
    free(it);
}
END_TEST

/* An entry larger than the whole budget is not stored and not found; the
 * others stay; an entry exactly the budget's size is stored. */
START_TEST(test_larger_than_budget)
{
    es_lru lru;
    item *it = items_new(3);
    lru_init(&lru, 500, it);
    put(&lru, &it[0], 100);
    es_lru_add(&lru, &it[1].node, it[1].key);
    ck_assert(!es_lru_store(&lru, &it[1].node, 501));
    ck_assert(!it[1].node.in_table && !it[1].node.stored);
    ck_assert_ptr_null(get(&lru, "k1"));
    ck_assert_uint_eq(es_lru_evict(&lru), 0);
    ck_assert_uint_eq(lru.bytes, 100);
    ck_assert_uint_eq(lru.entries, 1);
    put(&lru, &it[2], 500);                      /* fits alone: k0 goes */
    size_t order[3];
    ck_assert_uint_eq(evict_all(&lru, order), 1);
    ck_assert_uint_eq(order[0], 0);
    ck_assert_ptr_eq(get(&lru, "k2"), &it[2]);
    ck_assert_uint_eq(lru.bytes, 500);
    es_lru_destroy(&lru);
    ck_assert_int_eq(it[1].freed, 0);
    free(it);
}
END_TEST

/* The budget is exact: full to the byte is kept, one byte over evicts. */
START_TEST(test_budget_to_the_byte)
{
    es_lru lru;
    item *it = items_new(3);
    lru_init(&lru, 100, it);
    put(&lru, &it[0], 60);
    put(&lru, &it[1], 40);                       /* 100: full, within the budget */
    ck_assert_uint_eq(es_lru_evict(&lru), 0);
    ck_assert_uint_eq(lru.bytes, 100);
    put(&lru, &it[2], 1);                        /* 101: one byte over, the oldest goes */
    size_t order[3];
    ck_assert_uint_eq(evict_all(&lru, order), 1);
    ck_assert_uint_eq(order[0], 0);
    ck_assert_uint_eq(lru.bytes, 41);
    es_lru_destroy(&lru);
    free(it);
}
END_TEST

/* An entry with holders is evicted (no longer found) but freed only once the
 * last holder lets go; stored and pending entries are never dropped. */
START_TEST(test_holders_keep_removed_entries)
{
    es_lru lru;
    item *it = items_new(3);
    lru_init(&lru, 100, it);
    put(&lru, &it[0], 60);
    it[0].node.holders = 1;                      /* a request still has to take it */
    put(&lru, &it[1], 60);                       /* 120 > 100: k0 is evicted ... */
    ck_assert_uint_eq(es_lru_evict(&lru), 1);
    ck_assert_ptr_null(get(&lru, "k0"));
    ck_assert(!it[0].node.in_table && !it[0].node.stored);
    ck_assert_int_eq(it[0].freed, 0);            /* ... but not freed */
    ck_assert_uint_eq(lru.bytes, 60);
    es_lru_drop_if_unused(&lru, &it[0].node);
    ck_assert_int_eq(it[0].freed, 0);
    it[0].node.holders = 0;
    es_lru_drop_if_unused(&lru, &it[0].node);    /* the last holder lets go */
    ck_assert_int_eq(it[0].freed, 1);
    es_lru_drop_if_unused(&lru, &it[1].node);    /* stored: kept */
    es_lru_add(&lru, &it[2].node, it[2].key);
    es_lru_drop_if_unused(&lru, &it[2].node);    /* pending: kept */
    ck_assert_int_eq(it[1].freed + it[2].freed, 0);
    es_lru_destroy(&lru);
    ck_assert_int_eq(it[1].freed + it[2].freed, 2);
    ck_assert_int_eq(it[0].freed, 1);
    free(it);
}
END_TEST

/* The second chance: the items spare() names (their "referenced" bit, cleared
 * as it is read) are moved to the front instead of evicted; one that is
 * referenced again at every look is spared at most once per stored node and
 * call, so eviction still ends and the budget holds. */
static bool referenced[8];
static item *spare_base;
static bool spare_marked(es_lru_node *n)
{
    size_t i = (size_t)(ES_LRU_ENTRY(n, item, node) - spare_base);
    bool was = referenced[i];
    referenced[i] = false;
    return was;
}
static bool spare_always(es_lru_node *n)
{
    (void)n;
    return true;
}

START_TEST(test_second_chance)
{
    es_lru lru;
    item *it = items_new(4);
    spare_base = it;
    lru_init(&lru, 300, it);
    put(&lru, &it[0], 100);
    put(&lru, &it[1], 100);
    put(&lru, &it[2], 100);
    memset(referenced, 0, sizeof referenced);
    referenced[0] = true; /* the oldest was used since (without a touch) */
    put(&lru, &it[3], 100);
    ck_assert_uint_eq(es_lru_evict_sparing(&lru, spare_marked), 1);
    ck_assert_int_eq(it[1].freed, 1); /* k1 went, k0 got its second chance */
    ck_assert_ptr_nonnull(get(&lru, "k0"));
    ck_assert(!referenced[0]);
    es_lru_destroy(&lru);
    free(it);
}
END_TEST

START_TEST(test_second_chance_ends)
{
    es_lru lru;
    item *it = items_new(4);
    lru_init(&lru, 250, it);
    for (int i = 0; i < 4; i++)
        put(&lru, &it[i], 100);
    ck_assert_uint_eq(es_lru_evict_sparing(&lru, spare_always), 2);
    ck_assert_uint_le(lru.bytes, 250);
    es_lru_destroy(&lru);
    free(it);
}
END_TEST

/* A zero budget keeps nothing with bytes, but still finds pending entries. */
START_TEST(test_zero_budget)
{
    es_lru lru;
    item *it = items_new(2);
    lru_init(&lru, 0, it);
    es_lru_add(&lru, &it[0].node, it[0].key);
    ck_assert_ptr_eq(get(&lru, "k0"), &it[0]);
    ck_assert(!es_lru_store(&lru, &it[0].node, 1));
    ck_assert_ptr_null(get(&lru, "k0"));
    put(&lru, &it[1], 0);
    ck_assert_ptr_eq(get(&lru, "k1"), &it[1]);
    ck_assert_uint_eq(es_lru_evict(&lru), 0);
    es_lru_destroy(&lru);
    ck_assert_int_eq(it[1].freed, 1);
    free(it);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("lru");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_add_find_store_remove);
    tcase_add_test(tc, test_many_keys);
    tcase_add_test(tc, test_lru_order);
    tcase_add_test(tc, test_pending_never_evicted);
    tcase_add_test(tc, test_larger_than_budget);
    tcase_add_test(tc, test_budget_to_the_byte);
    tcase_add_test(tc, test_holders_keep_removed_entries);
    tcase_add_test(tc, test_zero_budget);
    tcase_add_test(tc, test_second_chance);
    tcase_add_test(tc, test_second_chance_ends);
    suite_add_tcase(s, tc);
    return s;
}

ES_CHECK_MAIN(make_suite)
