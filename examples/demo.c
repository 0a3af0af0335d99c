/* The C half of `make demo`.
 *
 *   demo DATA_DIR
 *
 * examples/demo.py has already created topic "orders" (4 partitions) in
 * DATA_DIR and produced to it. This program opens the same directory,
 * consumes everything in "orders" and prints a summary, then produces 1000
 * records of its own to "c-events" (2 partitions, created if missing) with
 * keys "c-<i>" and values "hello from C <i>", asynchronously with delivery
 * callbacks, and prints the offsets.
 * `examples/demo.py DATA_DIR --verify` then checks them from Python.
 *
 * Build: cc -std=c11 -Wall -Werror -Iinclude examples/demo.c \
 *            -Ltarget/release -lmqlite -Wl,-rpath,$PWD/target/release
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mqlite.h"

#define SHOW_FIRST 5
#define C_EVENTS 1000
#define MAX_PARTITIONS 64

/* Prints a failed call's status and error text, and exits. */
static void check(mql_status st, const char *what) {
    if (st != MQL_OK) {
        fprintf(stderr, "demo: %s failed: %s: %s\n", what, mql_status_str(st), mql_last_error());
        exit(1);
    }
}

/* Prints up to 60 bytes, escaping what is not printable. */
static void print_bytes(const void *data, size_t len) {
    if (data == NULL) {
        printf("(null)");
        return;
    }
    const unsigned char *p = data;
    putchar('"');
    for (size_t i = 0; i < len && i < 60; i++) {
        if (isprint(p[i]) && p[i] != '\\')
            putchar(p[i]);
        else
            printf("\\x%02x", p[i]);
    }
    putchar('"');
    if (len > 60) printf("... (%zu bytes)", len);
}

static void print_offsets(mql_broker *mq, const char *topic) {
    uint32_t parts = 0;
    check(mql_topic_partition_count(mq, topic, &parts), "mql_topic_partition_count");
    printf("offsets of \"%s\":\n", topic);
    for (uint32_t p = 0; p < parts; p++) {
        uint64_t start, end;
        check(mql_topic_offsets(mq, topic, p, &start, &end), "mql_topic_offsets");
        printf("  partition %u: offsets %llu..%llu (%llu records)\n", (unsigned)p, (unsigned long long)start,
               (unsigned long long)end, (unsigned long long)(end - start));
    }
}

/* Consumes everything in "orders" and prints a summary. */
static void consume_orders(mql_broker *mq) {
    uint32_t parts = 0;
    check(mql_topic_partition_count(mq, "orders", &parts), "mql_topic_partition_count(\"orders\")");
    if (parts > MAX_PARTITIONS) parts = MAX_PARTITIONS;
    uint64_t expected = 0;
    for (uint32_t p = 0; p < parts; p++) {
        uint64_t start, end;
        check(mql_topic_offsets(mq, "orders", p, &start, &end), "mql_topic_offsets");
        expected += end - start;
    }

    /* A consumer of its own group, so it reads everything from the start. */
    mql_consumer *c;
    check(mql_consumer_new(mq, "c-demo", NULL, &c), "mql_consumer_new");
    check(mql_subscribe(c, "orders"), "mql_subscribe");
    uint64_t per_partition[MAX_PARTITIONS] = {0};
    uint64_t total = 0;
    printf("consuming \"orders\" from C (%u partitions, %llu records):\n", (unsigned)parts,
           (unsigned long long)expected);
    while (total < expected) {
        mql_message *m;
        mql_status st = mql_poll(c, 1000, &m);
        if (st == MQL_TIMEOUT) break;
        check(st, "mql_poll");
        uint32_t p = mql_message_partition(m);
        if (p < MAX_PARTITIONS) per_partition[p]++;
        if (total < SHOW_FIRST) {
            size_t klen, vlen;
            const void *key = mql_message_key(m, &klen);
            const void *value = mql_message_value(m, &vlen);
            printf("  %s/%u@%llu key=", mql_message_topic(m), (unsigned)p,
                   (unsigned long long)mql_message_offset(m));
            print_bytes(key, klen);
            printf(" value=");
            print_bytes(value, vlen);
            size_t headers = mql_message_header_count(m);
            for (size_t i = 0; i < headers; i++) {
                const char *name;
                const void *hv;
                size_t name_len, hv_len;
                check(mql_message_header(m, i, &name, &name_len, &hv, &hv_len), "mql_message_header");
                printf(" %s=", name);
                print_bytes(hv, hv_len);
            }
            printf("\n");
        }
        total++;
        mql_message_free(m);
    }
    if (total > SHOW_FIRST) printf("  ...\n");
    for (uint32_t p = 0; p < parts; p++)
        printf("  partition %u: %llu records\n", (unsigned)p, (unsigned long long)per_partition[p]);
    printf("consumed %llu of %llu records\n", (unsigned long long)total, (unsigned long long)expected);
    mql_consumer_free(c);
    if (total != expected) {
        fprintf(stderr, "demo: consumed %llu records, expected %llu\n", (unsigned long long)total,
                (unsigned long long)expected);
        exit(1);
    }
}

/* Delivery reports of the asynchronous sends below. With linger_ms they
 * run on the producer's background thread (or inside mql_producer_flush),
 * so the counters are only read after the flush. */
struct delivery {
    int delivered;
    int failed;
};

static void on_delivery(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    struct delivery *d = user_data;
    (void)md;
    if (status == MQL_OK) {
        d->delivered++; /* callbacks of one producer run one at a time */
    } else {
        d->failed++;
        fprintf(stderr, "demo: a record failed: %s: %s\n", mql_status_str(status), error_message);
    }
}

/* Produces C_EVENTS records to "c-events", asynchronously in batches. */
static void produce_events(mql_broker *mq) {
    mql_topic_config *tc;
    check(mql_topic_config_new(2, &tc), "mql_topic_config_new");
    mql_status st = mql_topic_create(mq, "c-events", tc);
    mql_topic_config_free(tc);
    if (st != MQL_TOPIC_EXISTS) check(st, "mql_topic_create(\"c-events\")");

    mql_producer_config *pc;
    check(mql_producer_config_new(&pc), "mql_producer_config_new");
    check(mql_producer_config_set_linger_ms(pc, 5), "mql_producer_config_set_linger_ms");
    mql_producer *p;
    check(mql_producer_new(mq, pc, &p), "mql_producer_new");
    mql_producer_config_free(pc);
    struct delivery d = {0, 0};
    char key[32], value[64];
    for (int i = 0; i < C_EVENTS; i++) {
        int klen = snprintf(key, sizeof key, "c-%d", i);
        int vlen = snprintf(value, sizeof value, "hello from C %d", i);
        mql_record rec = MQL_RECORD_INIT;
        rec.topic = "c-events";
        rec.key = key;
        rec.key_len = (size_t)klen;
        rec.value = value;
        rec.value_len = (size_t)vlen;
        check(mql_produce(p, &rec, on_delivery, &d), "mql_produce"); /* copies key and value */
    }
    check(mql_producer_flush(p), "mql_producer_flush"); /* every callback has run now */
    mql_producer_stats stats;
    check(mql_producer_get_stats(p, &stats), "mql_producer_get_stats");
    mql_producer_free(p);
    printf("produced %d records to \"c-events\" from C: %d delivered, %d failed, %llu batches (%.1f records each)\n",
           C_EVENTS, d.delivered, d.failed, (unsigned long long)stats.batches, stats.average_batch_records);
    if (d.delivered != C_EVENTS) exit(1);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s DATA_DIR\n", argv[0]);
        return 2;
    }
    printf("mqlite %s (C API), data directory %s\n", mql_version(), argv[1]);
    mql_broker *mq;
    check(mql_open(argv[1], NULL, &mq), "mql_open");
    consume_orders(mq);
    produce_events(mq);
    print_offsets(mq, "c-events");
    check(mql_close(mq), "mql_close");
    printf("closed %s\n", argv[1]);
    return 0;
}
