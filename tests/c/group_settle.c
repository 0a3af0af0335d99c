/* A group settles within two polls of each member, whatever the members
 * hold, while a producer thread writes continuously: 8 partitions; member A
 * polls one message at a time (so it holds fetched messages not handed out
 * yet); B joins and within two mql_poll calls each the partitions are split
 * 4/4; B closes and within two polls A owns all 8. Messages fetched but not
 * handed out for a partition that moved are dropped and the new owner
 * starts at the committed offset: every record written is delivered (at
 * least once), none skipped. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "check.h"

#define PARTITIONS 8

static atomic_bool stop;

static void *write_continuously(void *arg) {
    mql_broker *mq = arg;
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    char value[32];
    for (unsigned n = 0; !atomic_load(&stop); n++) {
        snprintf(value, sizeof value, "%u", n);
        for (uint32_t part = 0; part < PARTITIONS; part++) send_to(p, "t", part, value);
        if (n % 16 == 15) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    CHECK_OK(mql_producer_flush(p));
    mql_producer_free(p);
    return NULL;
}

/* Offsets delivered, per partition: seen[p][o] != 0. */
static unsigned char *seen[PARTITIONS];
static size_t seen_cap[PARTITIONS];

static void mark(uint32_t p, uint64_t o) {
    CHECK(p < PARTITIONS);
    if (o >= seen_cap[p]) {
        size_t cap = seen_cap[p] == 0 ? 4096 : seen_cap[p];
        while (cap <= o) cap *= 2;
        unsigned char *grown = realloc(seen[p], cap);
        CHECK(grown != NULL);
        memset(grown + seen_cap[p], 0, cap - seen_cap[p]);
        seen[p] = grown;
        seen_cap[p] = cap;
    }
    seen[p][o] = 1;
}

/* One poll of `c`, up to 100 ms; a message is marked as delivered. */
static void take(mql_consumer *c) {
    mql_message *m = NULL;
    mql_status st = mql_poll(c, 100, &m);
    if (st == MQL_TIMEOUT) return;
    CHECK_OK(st);
    mark(mql_message_partition(m), mql_message_offset(m));
    mql_message_free(m);
}

static size_t owned(mql_consumer *c) {
    size_t n = 99;
    CHECK_OK(mql_assignment(c, NULL, 0, &n));
    return n;
}

static mql_consumer *member(mql_broker *mq) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, true));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(c, "t"));
    return c;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", PARTITIONS);
    pthread_t writer;
    CHECK(pthread_create(&writer, NULL, write_continuously, mq) == 0);
    struct timespec warmup = {0, 50000000};
    nanosleep(&warmup, NULL);

    mql_consumer *a = member(mq);
    for (int i = 0; i < 5; i++) take(a);
    CHECK(owned(a) == PARTITIONS);
    /* B joins while A holds most of a poll's worth of fetched messages. */
    mql_consumer *b = member(mq);
    for (int i = 0; i < 2; i++) {
        take(a);
        take(b);
    }
    printf("after B joined, two polls each: A owns %zu, B owns %zu\n", owned(a), owned(b));
    CHECK(owned(a) == 4 && owned(b) == 4);
    /* Both read on for a while, then B leaves. */
    for (double until = now() + 0.2; now() < until;) {
        take(a);
        take(b);
    }
    CHECK_OK(mql_consumer_close(b));
    for (int i = 0; i < 2; i++) take(a);
    printf("after B left, two polls: A owns %zu\n", owned(a));
    CHECK(owned(a) == PARTITIONS);
    atomic_store(&stop, true);
    CHECK(pthread_join(writer, NULL) == 0);

    /* A reads to the end of every partition. */
    double deadline = now() + 120;
    for (uint32_t p = 0; p < PARTITIONS; p++) {
        uint64_t end = end_of(mq, "t", p), pos = 0;
        for (;;) {
            CHECK_OK(mql_position(a, "t", p, &pos));
            if (pos >= end) break;
            CHECK(now() < deadline);
            take(a);
        }
        /* At least once: every record written was delivered to a member. */
        for (uint64_t o = 0; o < end; o++)
            if (o >= seen_cap[p] || !seen[p][o]) FAIL_AT("partition %u: offset %lu never delivered", p, (unsigned long)o);
        printf("partition %u: all %lu records delivered\n", p, (unsigned long)end);
        free(seen[p]);
    }
    mql_consumer_free(a);
    mql_consumer_free(b);
    CHECK_OK(mql_close(mq));
    return 0;
}
