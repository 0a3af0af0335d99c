/* Processor, orderly: every partition's messages are handled in offset
 * order (one worker per partition), a stop from inside the handler ends the
 * run, the committed offsets are then the end offsets; messages fetched but
 * not handed out before the processor took the consumer are not skipped;
 * the consumer refuses calls while lent and works again afterwards. */
#include <stdatomic.h>

#include "check.h"

#define PARTS 3
#define PER_PART 100

typedef struct {
    atomic_ullong next[PARTS]; /* the offset each partition must see next */
    atomic_int out_of_order;
    atomic_int handled;
    int want;
    mql_stopper *stopper;
} state;

static bool handle(void *user_data, const mql_message *m) {
    state *s = user_data;
    uint32_t p = mql_message_partition(m);
    uint64_t o = mql_message_offset(m);
    if (p >= PARTS || strcmp(mql_message_topic(m), "t") != 0) {
        atomic_fetch_add(&s->out_of_order, 1);
        return true;
    }
    unsigned long long want = o;
    if (!atomic_compare_exchange_strong(&s->next[p], &want, o + 1))
        atomic_fetch_add(&s->out_of_order, 1);
    if (atomic_fetch_add(&s->handled, 1) + 1 == s->want)
        CHECK_OK(mql_stopper_stop(s->stopper)); /* from inside the handler */
    return true;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", PARTS);
    fill(mq, "t", PARTS, PER_PART);

    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, false));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(c, "t"));

    state s = {.want = PARTS * PER_PART - 1};
    for (int p = 0; p < PARTS; p++) atomic_init(&s.next[p], 0);
    atomic_init(&s.out_of_order, 0);
    atomic_init(&s.handled, 0);

    /* One message handed out by mql_poll: the rest of that fetch stays
     * buffered and must reach the processor. */
    mql_message *first;
    CHECK_OK(mql_poll(c, 1000, &first));
    atomic_store(&s.next[mql_message_partition(first)], mql_message_offset(first) + 1);
    mql_message_free(first);

    mql_processor_config pc = MQL_PROCESSOR_CONFIG_INIT;
    CHECK(pc.threads == 4 && pc.mode == MQL_PROCESSING_MODE_ORDERLY && pc.commit_interval_ms == 1000);
    CHECK(pc.max_in_flight == 10000 && pc.retry_backoff_ms == 100 && pc.max_retries == -1);
    pc.threads = 2; /* fewer workers than partitions: still one per partition */
    pc.commit_interval_ms = 20;
    mql_processor *proc;
    CHECK_OK(mql_processor_new(c, &pc, &proc));
    CHECK_OK(mql_processor_stopper(proc, &s.stopper));

    /* Lent: the consumer refuses calls, and cannot be lent twice or freed. */
    mql_message *m = NULL;
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_INVALID_ARGUMENT, "lent to a processor");
    CHECK(m == NULL);
    CHECK_FAIL(mql_commit(c), MQL_INVALID_ARGUMENT, "lent to a processor");
    mql_processor *again = NULL;
    CHECK_FAIL(mql_processor_new(c, NULL, &again), MQL_INVALID_ARGUMENT, "already lent");
    CHECK(again == NULL);
    mql_consumer_free(c); /* refused: does nothing */
    CHECK(mql_last_error_code() == MQL_INVALID_ARGUMENT);

    mql_processor_stats st = {99, 99, 99, 99, 99};
    CHECK_OK(mql_processor_run(proc, handle, &s, &st));
    CHECK(atomic_load(&s.out_of_order) == 0);
    CHECK(atomic_load(&s.handled) == s.want);
    CHECK(st.processed == (uint64_t)s.want && st.retries == 0 && st.failed == 0);
    CHECK(st.commits >= 1);
    for (int p = 0; p < PARTS; p++) CHECK(atomic_load(&s.next[p]) == PER_PART);

    mql_processor_free(proc);
    mql_stopper_stop(s.stopper); /* after the processor was freed: nothing */
    mql_stopper_free(s.stopper);

    /* The consumer is back: committed = end, and reading goes on there. */
    for (uint32_t p = 0; p < PARTS; p++) {
        uint64_t off = 0;
        CHECK_OK(mql_committed(c, "t", p, &off, NULL, 0, NULL));
        CHECK(off == end_of(mq, "t", p));
        CHECK_OK(mql_position(c, "t", p, &off));
        CHECK(off == PER_PART);
    }
    mql_producer *prod;
    CHECK_OK(mql_producer_new(mq, NULL, &prod));
    CHECK(send_to(prod, "t", 1, "late") == PER_PART);
    mql_producer_free(prod);
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_partition(m) == 1 && mql_message_offset(m) == PER_PART && value_is(m, "late"));
    mql_message_free(m);
    CHECK_OK(mql_commit(c));

    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
    puts("processor_orderly: ok");
    return 0;
}
