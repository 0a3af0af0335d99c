/* Named producers and application sequences: duplicates come back with
 * duplicate=1 and the original offset (blocking, batch and asynchronous
 * sends), last_sequence survives reopening the data directory, a newer
 * producer of the same name fences the older one, strict sequences refuse
 * gaps, ids and epochs, and the argument checks. */
#include "check.h"

#define PARTS 2

static mql_producer *named(mql_broker *mq, const char *name, size_t window, bool strict) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_name(pc, name));
    if (window) CHECK_OK(mql_producer_config_set_dedup_window(pc, window));
    CHECK_OK(mql_producer_config_set_strict_sequences(pc, strict));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

/* Record with sequence `seq` and value "seq-<seq>" (partition: any). */
static char value_buf[64][16];
static mql_record seq_record(const char *topic, int64_t seq) {
    mql_record r = MQL_RECORD_INIT;
    r.topic = topic;
    int n = snprintf(value_buf[seq % 64], sizeof value_buf[0], "seq-%lld", (long long)seq);
    r.value = value_buf[seq % 64];
    r.value_len = (size_t)n;
    r.sequence = seq;
    r.has_sequence = true;
    return r;
}

static mql_metadata send_seq(mql_producer *p, const char *topic, int64_t seq) {
    mql_record r = seq_record(topic, seq);
    mql_metadata md;
    CHECK_OK(mql_send_record(p, &r, &md));
    return md;
}

static void on_delivery(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    (void)error_message;
    CHECK(status == MQL_OK);
    *(mql_metadata *)user_data = *md;
}

static uint64_t total(mql_broker *mq, const char *topic, uint32_t parts) {
    uint64_t n = 0;
    for (uint32_t q = 0; q < parts; q++) n += end_of(mq, topic, q);
    return n;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "n", PARTS);
    make_topic(mq, "one", 1);

    /* --- argument checks --- */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_FAIL(mql_producer_config_set_name(pc, "bad name"), MQL_INVALID_ARGUMENT, "producer name");
    CHECK_FAIL(mql_producer_config_set_name(pc, ""), MQL_INVALID_ARGUMENT, "empty");
    CHECK_FAIL(mql_producer_config_set_dedup_window(pc, 0), MQL_INVALID_ARGUMENT, "dedup_window");
    CHECK_FAIL(mql_producer_config_set_dedup_window(pc, 1001), MQL_INVALID_ARGUMENT, "dedup_window");
    CHECK_OK(mql_producer_config_set_name(pc, "x"));
    CHECK_OK(mql_producer_config_set_idempotent(pc, false));
    mql_producer *p = NULL;
    CHECK_FAIL(mql_producer_new(mq, pc, &p), MQL_INVALID_ARGUMENT, "idempotent");
    CHECK(p == NULL);
    CHECK_OK(mql_producer_config_set_name(pc, NULL)); /* anonymous again */
    CHECK_OK(mql_producer_new(mq, pc, &p));          /* not idempotent */
    mql_producer_config_free(pc);
    int64_t id = 7, last = 7;
    int16_t epoch = 7;
    CHECK_OK(mql_producer_id(p, &id));
    CHECK_OK(mql_producer_epoch(p, &epoch));
    CHECK(id == -1 && epoch == -1);
    CHECK_FAIL(mql_producer_last_sequence(p, &last), MQL_INVALID_ARGUMENT, "idempotent");
    CHECK(last == 7);
    mql_record r = seq_record("n", 0);
    CHECK_FAIL(mql_send_record(p, &r, NULL), MQL_INVALID_ARGUMENT, "idempotent");
    mql_producer_free(p);
    /* An anonymous idempotent producer (the default). */
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    CHECK_OK(mql_producer_id(p, &id));
    CHECK_OK(mql_producer_epoch(p, &epoch));
    CHECK(id >= 0 && epoch == 0);
    CHECK_OK(mql_producer_last_sequence(p, &last));
    CHECK(last == -1);
    r.sequence = -1;
    CHECK_FAIL(mql_send_record(p, &r, NULL), MQL_INVALID_ARGUMENT, "sequence");
    mql_producer_free(p);
    CHECK(total(mq, "n", PARTS) == 0);

    /* --- duplicates --- */
    p = named(mq, "ingest", 20, false);
    int64_t ingest_id;
    CHECK_OK(mql_producer_id(p, &ingest_id));
    CHECK_OK(mql_producer_epoch(p, &epoch));
    CHECK(ingest_id >= 0 && epoch == 0);
    CHECK_OK(mql_producer_last_sequence(p, &last));
    CHECK(last == -1);
    mql_metadata first[13];
    for (int64_t s = 0; s < 10; s++) {
        first[s] = send_seq(p, "n", s);
        CHECK(!first[s].duplicate);
        CHECK(first[s].partition == (uint32_t)(s % PARTS)); /* sequence % partitions */
    }
    CHECK(total(mq, "n", PARTS) == 10);
    /* Re-sent: not written, the original's offset. */
    for (int64_t s = 3; s < 10; s += 4) {
        mql_metadata again = send_seq(p, "n", s);
        CHECK(again.duplicate);
        CHECK(again.partition == first[s].partition && again.offset == first[s].offset);
    }
    CHECK(total(mq, "n", PARTS) == 10);
    /* In a batch: 8 and 9 are duplicates, 10 to 12 new. */
    mql_record batch[5];
    for (int i = 0; i < 5; i++) batch[i] = seq_record("n", 8 + i);
    mql_metadata mds[5];
    CHECK_OK(mql_send_batch(p, batch, 5, mds));
    for (int i = 0; i < 5; i++) {
        int64_t s = 8 + i;
        CHECK(mds[i].duplicate == (s < 10));
        if (s < 10) CHECK(mds[i].offset == first[s].offset);
        else first[s] = mds[i];
    }
    CHECK(total(mq, "n", PARTS) == 13);
    /* Asynchronously. */
    mql_metadata async_md;
    memset(&async_md, 0, sizeof async_md);
    r = seq_record("n", 5);
    CHECK_OK(mql_produce(p, &r, on_delivery, &async_md));
    CHECK_OK(mql_producer_flush(p));
    CHECK(async_md.duplicate && async_md.offset == first[5].offset && async_md.partition == first[5].partition);
    CHECK(total(mq, "n", PARTS) == 13);
    for (int64_t s = 0; s < 13; s++) {
        char want[16];
        snprintf(want, sizeof want, "seq-%lld", (long long)s);
        CHECK(value_at(mq, "n", first[s].partition, first[s].offset, want));
    }
    mql_producer_stats st;
    CHECK_OK(mql_producer_get_stats(p, &st));
    CHECK(st.records == 13 && st.duplicates == 5);
    CHECK_OK(mql_producer_last_sequence(p, &last));
    CHECK(last == 12);

    /* --- fencing: a second producer of the name --- */
    mql_producer *p2 = named(mq, "ingest", 20, false);
    CHECK_OK(mql_producer_id(p2, &id));
    CHECK_OK(mql_producer_epoch(p2, &epoch));
    CHECK(id == ingest_id && epoch == 1);
    r = seq_record("n", 13);
    CHECK_FAIL(mql_send_record(p, &r, NULL), MQL_PRODUCER_FENCED, "fenced");
    CHECK_FAIL(mql_produce(p, &r, NULL, NULL), MQL_PRODUCER_FENCED, "fenced");
    CHECK_FAIL(mql_send_batch(p, &r, 1, NULL), MQL_PRODUCER_FENCED, "fenced");
    CHECK_FAIL(mql_send(p, "n", NULL, 0, "x", 1, NULL), MQL_PRODUCER_FENCED, "fenced");
    CHECK(total(mq, "n", PARTS) == 13); /* the fenced producer wrote nothing */
    CHECK_OK(mql_producer_last_sequence(p2, &last));
    CHECK(last == 12);
    mql_producer_free(p);
    mql_metadata md13 = send_seq(p2, "n", 13);
    CHECK(!md13.duplicate);
    mql_producer_free(p2);

    /* --- restart: the name keeps its id and its sequences --- */
    CHECK_OK(mql_close(mq));
    mq = open_data(dir, "data");
    p = named(mq, "ingest", 20, false);
    CHECK_OK(mql_producer_id(p, &id));
    CHECK_OK(mql_producer_epoch(p, &epoch));
    CHECK(id == ingest_id && epoch == 2);
    CHECK_OK(mql_producer_last_sequence(p, &last));
    CHECK(last == 13);
    mql_metadata again = send_seq(p, "n", 12);
    CHECK(again.duplicate && again.offset == first[12].offset);
    CHECK(total(mq, "n", PARTS) == 14);
    mql_producer_free(p);

    /* --- older than the dedup window: a duplicate, offset unknown --- */
    p = named(mq, "small-window", 1, false);
    mql_metadata small[6];
    for (int64_t s = 0; s < 6; s++) small[s] = send_seq(p, "one", s);
    mql_metadata old = send_seq(p, "one", 0);
    CHECK(old.duplicate && old.offset == MQL_OFFSET_UNKNOWN);
    mql_metadata recent = send_seq(p, "one", 5);
    CHECK(recent.duplicate && recent.offset == small[5].offset);
    mql_producer_free(p);

    /* --- strict sequences: gaps are refused --- */
    p = named(mq, "strict", 0, true);
    uint64_t before = end_of(mq, "one", 0);
    send_seq(p, "one", 0);
    send_seq(p, "one", 1);
    r = seq_record("one", 5);
    CHECK_FAIL(mql_send_record(p, &r, NULL), MQL_OUT_OF_ORDER_SEQUENCE, "expected 2, received 5");
    CHECK(end_of(mq, "one", 0) == before + 2);
    CHECK(send_seq(p, "one", 1).duplicate); /* a duplicate is not a gap */
    CHECK(!send_seq(p, "one", 2).duplicate);
    mql_producer_free(p);
    /* Without strictness (the default) gaps are fine. */
    p = named(mq, "loose", 0, false);
    send_seq(p, "one", 0);
    CHECK(!send_seq(p, "one", 10).duplicate);
    CHECK(send_seq(p, "one", 7).duplicate);
    mql_producer_free(p);

    CHECK_OK(mql_close(mq));
    puts("producer_named: ok");
    return 0;
}
