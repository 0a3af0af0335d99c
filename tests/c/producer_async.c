/* Asynchronous sends (mql_produce): every callback runs exactly once, in
 * send order per partition, with metadata that matches what a consumer
 * reads back; on the calling thread with the defaults, on the background
 * thread with linger_ms; flush, flush_timeout; a NULL callback; errors
 * returned at once (no callback) and errors delivered to the callback. */
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"

#define N 48
#define PARTITIONS 3

struct slot {
    int index;
    atomic_int calls;
    int ticket; /* order of arrival across all callbacks */
    mql_metadata md;
    mql_status status;
    char error[256];
    pthread_t thread;
};

static struct slot slots[N];
static atomic_int next_ticket;

static void on_delivery(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    struct slot *s = user_data;
    s->ticket = atomic_fetch_add(&next_ticket, 1);
    s->status = status;
    s->thread = pthread_self();
    if (status == MQL_OK) {
        CHECK(md != NULL && error_message == NULL);
        s->md = *md;
    } else {
        CHECK(md == NULL && error_message != NULL);
        snprintf(s->error, sizeof s->error, "%s", error_message);
    }
    atomic_fetch_add(&s->calls, 1);
}

static void reset(void) {
    for (int i = 0; i < N; i++) {
        slots[i].index = i;
        atomic_store(&slots[i].calls, 0);
        slots[i].ticket = -1;
        slots[i].status = MQL_PANIC;
    }
    atomic_store(&next_ticket, 0);
}

/* Sends record i of a round to `topic` (key "k<i % 5>", value "<tag>-<i>"). */
static void produce(mql_producer *p, const char *topic, const char *tag, int i) {
    char key[16], value[32];
    int kl = snprintf(key, sizeof key, "k%d", i % 5);
    int vl = snprintf(value, sizeof value, "%s-%d", tag, i);
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = topic;
    rec.key = key;
    rec.key_len = (size_t)kl;
    rec.value = value;
    rec.value_len = (size_t)vl;
    CHECK_OK(mql_produce(p, &rec, on_delivery, &slots[i]));
}

/* After a flush: every callback ran once, successfully, in send order per
 * partition, with offsets that hold exactly what was sent. */
static void check_round(mql_broker *mq, const char *topic, const char *tag) {
    for (int i = 0; i < N; i++) {
        CHECK(atomic_load(&slots[i].calls) == 1);
        CHECK_STATUS(slots[i].status, MQL_OK);
        CHECK(slots[i].md.partition < PARTITIONS);
        CHECK(!slots[i].md.duplicate);
        CHECK(slots[i].md.offset != MQL_OFFSET_UNKNOWN);
        CHECK(slots[i].md.timestamp > 1600000000000LL);
    }
    for (uint32_t part = 0; part < PARTITIONS; part++) {
        int last = -1;
        uint64_t expect = 0;
        for (int i = 0; i < N; i++) {
            if (slots[i].md.partition != part) continue;
            CHECK(slots[i].md.offset == expect); /* consecutive, in send order */
            expect++;
            if (last >= 0) CHECK(slots[i].ticket > slots[last].ticket); /* callbacks in order */
            last = i;
        }
        CHECK(end_of(mq, topic, part) == expect);
    }
    /* Read back in full and compare. */
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_subscribe(c, topic));
    for (int got = 0; got < N; got++) {
        mql_message *m;
        CHECK_OK(mql_poll(c, 1000, &m));
        int found = 0;
        for (int i = 0; i < N; i++) {
            if (slots[i].md.partition == mql_message_partition(m) && slots[i].md.offset == mql_message_offset(m)) {
                char key[16], value[32];
                snprintf(key, sizeof key, "k%d", i % 5);
                snprintf(value, sizeof value, "%s-%d", tag, i);
                CHECK(key_is(m, key) && value_is(m, value));
                CHECK(mql_message_timestamp(m) == slots[i].md.timestamp);
                found = 1;
            }
        }
        CHECK(found);
        mql_message_free(m);
    }
    mql_message *none;
    CHECK_STATUS(mql_poll(c, 0, &none), MQL_TIMEOUT);
    mql_consumer_free(c);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "defaults", PARTITIONS);
    make_topic(mq, "linger", PARTITIONS);
    make_topic(mq, "all", PARTITIONS);
    make_topic(mq, "doomed", 1);
    pthread_t me = pthread_self();

    /* 1. Defaults (linger_ms 0, acks 1): the callback has run on this thread
     * by the time mql_produce returns. */
    reset();
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    for (int i = 0; i < N; i++) {
        produce(p, "defaults", "d", i);
        CHECK(atomic_load(&slots[i].calls) == 1);
        CHECK(pthread_equal(slots[i].thread, me));
    }
    CHECK_OK(mql_producer_flush(p));
    check_round(mq, "defaults", "d");
    /* A NULL callback: no report wanted. */
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "defaults";
    rec.partition = 0;
    rec.value = "quiet";
    rec.value_len = 5;
    uint64_t end0 = end_of(mq, "defaults", 0);
    CHECK_OK(mql_produce(p, &rec, NULL, NULL));
    CHECK_OK(mql_producer_flush(p));
    CHECK(end_of(mq, "defaults", 0) == end0 + 1);
    CHECK(value_at(mq, "defaults", 0, end0, "quiet"));
    /* Errors found before queueing are returned at once; no callback. */
    reset();
    rec.topic = "nope";
    CHECK_FAIL(mql_produce(p, &rec, on_delivery, &slots[0]), MQL_UNKNOWN_TOPIC, "nope");
    rec.topic = "defaults";
    rec.partition = 7;
    CHECK_FAIL(mql_produce(p, &rec, on_delivery, &slots[0]), MQL_UNKNOWN_PARTITION, "partition 7");
    rec.partition = -3;
    CHECK_FAIL(mql_produce(p, &rec, on_delivery, &slots[0]), MQL_INVALID_ARGUMENT, "record->partition");
    rec.partition = 0;
    rec.key_len = 3; /* key NULL */
    CHECK_FAIL(mql_produce(p, &rec, on_delivery, &slots[0]), MQL_NULL_ARGUMENT, "record->key");
    rec.key_len = 0;
    CHECK_OK(mql_producer_flush(p));
    CHECK(atomic_load(&slots[0].calls) == 0);
    mql_producer_free(p);

    /* 2. linger_ms: the background thread writes the batches and runs the
     * callbacks; nothing is written until then. */
    reset();
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_linger_ms(pc, 20));
    CHECK_OK(mql_producer_new(mq, pc, &p));
    for (int i = 0; i < N; i++) produce(p, "linger", "l", i);
    CHECK_OK(mql_producer_flush(p));
    check_round(mq, "linger", "l");
    /* (Which thread ran each callback depends on timing: the background
     * thread after 20 ms, or this one inside flush. Each ran once.) */
    mql_producer_free(p);

    /* A long linger: flush_timeout(0) must give up (the acks=-1 flush has
     * not happened yet), and the records are still delivered afterwards. */
    reset();
    CHECK_OK(mql_producer_config_set_linger_ms(pc, 60000));
    CHECK_OK(mql_producer_config_set_acks(pc, -1));
    CHECK_OK(mql_producer_new(mq, pc, &p));
    for (int i = 0; i < N; i++) produce(p, "all", "a", i);
    CHECK(atomic_load(&slots[0].calls) == 0); /* still lingering */
    CHECK(end_of(mq, "all", 0) + end_of(mq, "all", 1) + end_of(mq, "all", 2) == 0);
    CHECK_FAIL(mql_producer_flush_timeout(p, 0), MQL_TIMEOUT, "timed out");
    CHECK_OK(mql_producer_flush_timeout(p, 10000));
    check_round(mq, "all", "a"); /* run by the background thread or this one, in flush */

    /* 3. A failure found when the batch is written goes to the callback:
     * the topic is deleted while its records linger. */
    reset();
    rec = (mql_record)MQL_RECORD_INIT;
    rec.topic = "doomed";
    rec.value = "x";
    rec.value_len = 1;
    CHECK_OK(mql_produce(p, &rec, on_delivery, &slots[0]));
    CHECK_OK(mql_produce(p, &rec, on_delivery, &slots[1]));
    CHECK_OK(mql_topic_delete(mq, "doomed"));
    mql_producer_flush(p); /* its own status does not matter here */
    for (int i = 0; i < 2; i++) {
        CHECK(atomic_load(&slots[i].calls) == 1);
        if (slots[i].status == MQL_OK) FAIL_AT("record %d to a deleted topic was acknowledged", i);
        CHECK(slots[i].error[0] != '\0');
    }
    mql_producer_stats st;
    CHECK_OK(mql_producer_get_stats(p, &st));
    CHECK(st.errors >= 2);
    mql_producer_config_free(pc);
    mql_producer_free(p);

    /* 4. acks=0: mql_send returns before the write, offset unknown; the
     * record is written by the next flush at the latest. */
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_acks(pc, 0));
    CHECK_OK(mql_producer_config_set_linger_ms(pc, 60000));
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    mql_metadata md;
    CHECK_OK(mql_send(p, "defaults", NULL, 0, "fire-and-forget", 15, &md));
    CHECK(md.offset == MQL_OFFSET_UNKNOWN && !md.duplicate && md.partition < PARTITIONS);
    uint64_t end = end_of(mq, "defaults", md.partition);
    CHECK(end == 0 || !value_at(mq, "defaults", md.partition, end - 1, "fire-and-forget")); /* not yet */
    CHECK_OK(mql_producer_flush(p));
    CHECK(end_of(mq, "defaults", md.partition) == end + 1);
    CHECK(value_at(mq, "defaults", md.partition, end, "fire-and-forget"));
    mql_producer_free(p);

    CHECK_OK(mql_close(mq));
    puts("producer_async: ok");
    return 0;
}
