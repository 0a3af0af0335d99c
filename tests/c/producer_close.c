/* Producer statistics, and closing: mql_producer_close delivers what is
 * pending (on the closing thread), later sends fail with MQL_CLOSED, the
 * handle still answers queries and must still be freed; mql_producer_free
 * of an open producer delivers what is pending too. */
#include "check.h"

static int calls;
static void count(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    (void)error_message;
    CHECK(status == MQL_OK && md != NULL && md->offset != MQL_OFFSET_UNKNOWN);
    (*(int *)user_data)++; /* runs on this thread: see below */
}

static mql_producer *lingering(mql_broker *mq) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_linger_ms(pc, 60000)); /* only a flush, close or free writes */
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 1);

    /* --- statistics --- */
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    mql_producer_stats st;
    memset(&st, 0xFF, sizeof st);
    CHECK_OK(mql_producer_get_stats(p, &st));
    CHECK(st.records == 0 && st.bytes == 0 && st.batches == 0 && st.errors == 0 && st.duplicates == 0);
    CHECK(st.buffered_bytes == 0 && st.peak_buffered_bytes == 0);
    CHECK(st.average_batch_records == 0.0 && st.average_batch_bytes == 0.0);
    for (int i = 0; i < 5; i++) CHECK_OK(mql_send(p, "t", NULL, 0, "12345678", 8, NULL));
    CHECK_FAIL(mql_send(p, "missing", NULL, 0, "x", 1, NULL), MQL_UNKNOWN_TOPIC, "missing");
    CHECK_OK(mql_producer_get_stats(p, &st));
    CHECK(st.records == 5 && st.batches == 5 && st.errors == 1 && st.duplicates == 0);
    CHECK(st.bytes > 5 * 8);
    CHECK(st.average_batch_records == 1.0);
    CHECK(st.average_batch_bytes == (double)st.bytes / 5.0);
    mql_record two[2] = {MQL_RECORD_INIT, MQL_RECORD_INIT};
    two[0].topic = two[1].topic = "t";
    CHECK_OK(mql_send_batch(p, two, 2, NULL));
    CHECK_OK(mql_producer_get_stats(p, &st));
    CHECK(st.records == 7 && st.batches == 6);
    CHECK(st.average_batch_records == 7.0 / 6.0);
    mql_producer_free(p);

    /* --- close: pending records are written, their callbacks run here --- */
    p = lingering(mq);
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.value = "pending";
    rec.value_len = 7;
    uint64_t end = end_of(mq, "t", 0);
    calls = 0;
    for (int i = 0; i < 3; i++) CHECK_OK(mql_produce(p, &rec, count, &calls));
    CHECK(calls == 0 && end_of(mq, "t", 0) == end);
    CHECK_OK(mql_producer_close(p));
    CHECK(calls == 3 && end_of(mq, "t", 0) == end + 3);
    CHECK(value_at(mq, "t", 0, end + 2, "pending"));
    CHECK_OK(mql_producer_close(p)); /* twice is fine */

    /* Every send now fails with MQL_CLOSED, and writes nothing. */
    mql_metadata md;
    memset(&md, 0x77, sizeof md);
    mql_metadata md_before = md;
    CHECK_FAIL(mql_send(p, "t", NULL, 0, "x", 1, &md), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_send_record(p, &rec, &md), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_produce(p, &rec, count, &calls), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_send_batch(p, &rec, 1, &md), MQL_CLOSED, "closed");
    CHECK(memcmp(&md, &md_before, sizeof md) == 0);
    CHECK(calls == 3 && end_of(mq, "t", 0) == end + 3);
    /* ... but the handle still answers. */
    CHECK_OK(mql_producer_get_stats(p, &st));
    CHECK(st.records == 3 && st.errors >= 3); /* (the refused batch is not counted) */
    int64_t id, last;
    int16_t epoch;
    CHECK_OK(mql_producer_id(p, &id));
    CHECK_OK(mql_producer_epoch(p, &epoch));
    CHECK(id >= 0 && epoch == 0);
    CHECK_OK(mql_producer_last_sequence(p, &last));
    CHECK(last == -1); /* records sent without a sequence do not count */
    mql_producer_free(p);

    /* --- free without close: pending records are written too --- */
    p = lingering(mq);
    calls = 0;
    for (int i = 0; i < 2; i++) CHECK_OK(mql_produce(p, &rec, count, &calls));
    CHECK(calls == 0);
    mql_producer_free(p);
    CHECK(calls == 2 && end_of(mq, "t", 0) == end + 5);

    /* --- a producer whose broker was closed --- */
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    CHECK_OK(mql_close(mq));
    CHECK_FAIL(mql_produce(p, &rec, count, &calls), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_send_batch(p, &rec, 1, NULL), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_producer_flush_timeout(p, 10), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_producer_last_sequence(p, &last), MQL_CLOSED, "closed");
    CHECK_OK(mql_producer_get_stats(p, &st));
    CHECK(calls == 2);
    mql_producer_free(p);

    puts("producer_close: ok");
    return 0;
}
