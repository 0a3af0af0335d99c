/* Interceptors: on_send sees each record and may replace it (value,
 * headers, partition); a failing or invalid on_send is skipped without
 * losing the record; on_acknowledgement runs once per record, with
 * metadata or with the error; interceptors run in the order added. */
#include <stdatomic.h>

#include "check.h"

struct acks {
    atomic_int ok;
    atomic_int failed;
    atomic_int duplicates;
    mql_status last_status;
    char last_error[256];
};

/* A: prefixes the value with "A:", adds header via=A, and sends records
 * keyed "redirect" to partition 2. The replacement lives in thread-local
 * buffers, valid until the next call on this thread (the library copies
 * it as soon as on_send returns). */
static atomic_int a_calls;
static char a_seen_topic[64];

static int prefix_a(void *user_data, const mql_record_view *rec, mql_record_view *out) {
    static _Thread_local char value[512];
    static _Thread_local mql_header headers[8];
    CHECK(user_data == (void *)&a_calls);
    atomic_fetch_add(&a_calls, 1);
    snprintf(a_seen_topic, sizeof a_seen_topic, "%s", rec->topic);
    /* *out starts as a copy of *rec. */
    CHECK(out->topic == rec->topic && out->value == rec->value && out->value_len == rec->value_len);
    CHECK(out->partition == rec->partition && out->timestamp == rec->timestamp);
    if (rec->value == NULL || rec->value_len + 2 > sizeof value || rec->header_count >= 8) return 0;
    value[0] = 'A';
    value[1] = ':';
    memcpy(value + 2, rec->value, rec->value_len);
    out->value = value;
    out->value_len = rec->value_len + 2;
    for (size_t i = 0; i < rec->header_count; i++) headers[i] = rec->headers[i];
    headers[rec->header_count] = (mql_header){"via", 3, "A", 1};
    out->headers = headers;
    out->header_count = rec->header_count + 1;
    if (rec->key_len == 8 && memcmp(rec->key, "redirect", 8) == 0) out->partition = 2;
    return 0;
}

/* B: always fails (after scribbling on *out, which must be ignored). */
static atomic_int b_calls;
static int always_fails(void *user_data, const mql_record_view *rec, mql_record_view *out) {
    (void)user_data;
    (void)rec;
    atomic_fetch_add(&b_calls, 1);
    out->value = "B was here";
    out->value_len = 10;
    return -5;
}

/* C: returns 0 with an invalid replacement (no topic): skipped too. */
static atomic_int c_calls;
static int invalid_out(void *user_data, const mql_record_view *rec, mql_record_view *out) {
    (void)user_data;
    (void)rec;
    atomic_fetch_add(&c_calls, 1);
    out->topic = NULL;
    out->value = "C was here";
    out->value_len = 10;
    return 0;
}

static void count_acks(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    struct acks *a = user_data;
    if (status == MQL_OK) {
        CHECK(md != NULL && error_message == NULL);
        atomic_fetch_add(&a->ok, 1);
        if (md->duplicate) atomic_fetch_add(&a->duplicates, 1);
    } else {
        CHECK(md == NULL && error_message != NULL);
        a->last_status = status;
        snprintf(a->last_error, sizeof a->last_error, "%s", error_message);
        atomic_fetch_add(&a->failed, 1);
    }
}

/* The record at partition/offset of "t" has `value` and `headers` headers,
 * the last one via=A. */
static void check_record(mql_broker *mq, uint32_t partition, uint64_t offset, const char *value, size_t headers) {
    mql_message *m = read_at(mq, "t", partition, offset);
    if (!value_is(m, value)) FAIL_AT("record %u/%llu: unexpected value", (unsigned)partition, (unsigned long long)offset);
    CHECK(mql_message_header_count(m) == headers);
    const char *name;
    const void *hv;
    size_t name_len, hv_len;
    CHECK_OK(mql_message_header(m, headers - 1, &name, &name_len, &hv, &hv_len));
    CHECK(bytes_eq(name, name_len, "via") && bytes_eq(hv, hv_len, "A"));
    mql_message_free(m);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 4);

    struct acks acks;
    memset(&acks, 0, sizeof acks);
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    mql_interceptor none = {NULL, NULL, NULL};
    CHECK_FAIL(mql_producer_config_add_interceptor(pc, &none), MQL_INVALID_ARGUMENT, "neither");
    mql_interceptor a = {prefix_a, NULL, &a_calls};
    mql_interceptor b = {always_fails, NULL, NULL};
    mql_interceptor c = {invalid_out, NULL, NULL};
    mql_interceptor d = {NULL, count_acks, &acks}; /* acknowledgements only */
    CHECK_OK(mql_producer_config_add_interceptor(pc, &a));
    CHECK_OK(mql_producer_config_add_interceptor(pc, &b));
    CHECK_OK(mql_producer_config_add_interceptor(pc, &c));
    CHECK_OK(mql_producer_config_add_interceptor(pc, &d));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc); /* the producer keeps its copy */

    /* 1. mql_send: A's change kept, B's and C's failures skipped. */
    mql_metadata md;
    CHECK_OK(mql_send(p, "t", "k", 1, "one", 3, &md));
    CHECK(strcmp(a_seen_topic, "t") == 0);
    check_record(mq, md.partition, md.offset, "A:one", 1);

    /* 2. mql_send_record with a header: the header is kept, via=A added;
     * on_send may move the record to another partition. */
    mql_header h = {"orig", 4, "1", 1};
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.key = "redirect";
    rec.key_len = 8;
    rec.value = "two";
    rec.value_len = 3;
    rec.headers = &h;
    rec.header_count = 1;
    CHECK_OK(mql_send_record(p, &rec, &md));
    CHECK(md.partition == 2);
    check_record(mq, 2, md.offset, "A:two", 2);

    /* 3. A batch, and 4. asynchronous sends. */
    mql_record batch[3] = {MQL_RECORD_INIT, MQL_RECORD_INIT, MQL_RECORD_INIT};
    const char *bv[3] = {"b0", "b1", "b2"};
    for (int i = 0; i < 3; i++) {
        batch[i].topic = "t";
        batch[i].partition = 1;
        batch[i].value = bv[i];
        batch[i].value_len = 2;
    }
    mql_metadata mds[3];
    CHECK_OK(mql_send_batch(p, batch, 3, mds));
    for (int i = 0; i < 3; i++) {
        char want[8];
        snprintf(want, sizeof want, "A:%s", bv[i]);
        check_record(mq, 1, mds[i].offset, want, 1);
    }
    rec.key = NULL;
    rec.key_len = 0;
    rec.partition = 3;
    rec.value = "async";
    rec.value_len = 5;
    uint64_t end3 = end_of(mq, "t", 3);
    for (int i = 0; i < 4; i++) CHECK_OK(mql_produce(p, &rec, NULL, NULL));
    CHECK_OK(mql_producer_flush(p));
    for (int i = 0; i < 4; i++) check_record(mq, 3, end3 + (uint64_t)i, "A:async", 2);

    /* 9 records so far; each interceptor's on_send ran once per record,
     * and on_acknowledgement once per record, successfully. */
    CHECK(atomic_load(&a_calls) == 9);
    CHECK(atomic_load(&b_calls) == 9);
    CHECK(atomic_load(&c_calls) == 9);
    CHECK(atomic_load(&acks.ok) == 9);
    CHECK(atomic_load(&acks.failed) == 0);

    /* 5. A failing send is acknowledged with its error. */
    CHECK_FAIL(mql_send(p, "missing", NULL, 0, "x", 1, &md), MQL_UNKNOWN_TOPIC, "missing");
    CHECK(atomic_load(&acks.failed) == 1);
    CHECK(acks.last_status == MQL_UNKNOWN_TOPIC);
    CHECK(strstr(acks.last_error, "missing") != NULL);
    rec.partition = 9;
    CHECK_FAIL(mql_produce(p, &rec, NULL, NULL), MQL_UNKNOWN_PARTITION, "partition 9");
    CHECK(atomic_load(&acks.failed) == 2);
    CHECK(acks.last_status == MQL_UNKNOWN_PARTITION);
    CHECK(atomic_load(&acks.ok) == 9);

    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    puts("producer_interceptors: ok");
    return 0;
}
