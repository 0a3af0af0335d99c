/* What may be repeated and what may outlive what. Closing may be repeated
 * (mql_producer_close, mql_consumer_close: MQL_OK again, and the handles
 * must still be freed once); messages and group infos outlive the consumer
 * and broker they came from; wakers and stoppers outlive their consumer and
 * processor (and then do nothing); configs are copied, so freeing or
 * changing one later does not touch what was made from it; handles may be
 * freed in any order relative to their broker. A consumer lent to a
 * processor refuses to be freed until the processor is.
 *
 * What is not tested, because it is undefined behaviour the library cannot
 * detect (the header says so): using a handle after its _free, or a broker
 * after mql_close, and freeing anything twice. tests/c/canary/ shows that
 * both passes of run.sh report such misuse in C code. */
#include "check.h"

static bool never(void *user_data, const mql_message *m) {
    (void)user_data;
    (void)m;
    return false;
}

/* Sends one record with a header to t/0. */
static void send_with_header(mql_producer *p, const char *value) {
    mql_header h = {"h", 1, "hv", 2};
    mql_record r = MQL_RECORD_INIT;
    r.topic = "t";
    r.partition = 0;
    r.key = "k";
    r.key_len = 1;
    r.value = value;
    r.value_len = strlen(value);
    r.headers = &h;
    r.header_count = 1;
    CHECK_OK(mql_send_record(p, &r, NULL));
}

static int message_is(const mql_message *m, uint64_t offset, const char *value) {
    const char *name;
    const void *hv;
    size_t name_len, hv_len;
    if (mql_message_header_count(m) != 1) return 0;
    CHECK_OK(mql_message_header(m, 0, &name, &name_len, &hv, &hv_len));
    return strcmp(mql_message_topic(m), "t") == 0 && mql_message_partition(m) == 0 &&
           mql_message_offset(m) == offset && key_is(m, "k") && value_is(m, value) && bytes_eq(name, name_len, "h") &&
           bytes_eq(hv, hv_len, "hv");
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);

    /* --- configs are copied --- */
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    char data[4096];
    join_path(data, sizeof data, dir, "data");
    mql_broker *mq;
    CHECK_OK(mql_open(data, cfg, &mq));
    mql_config_free(cfg); /* right after use */
    make_topic(mq, "t", 1);
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_client_id(cc, "first"));
    mql_consumer *a, *b;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &a));
    CHECK_OK(mql_consumer_config_set_client_id(cc, "second")); /* a keeps "first" */
    CHECK_OK(mql_consumer_new(mq, "g", cc, &b));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(a, "t"));
    CHECK_OK(mql_subscribe(b, "t"));
    char id[64];
    CHECK_OK(mql_consumer_member_id(a, id, sizeof id, NULL));
    CHECK(strncmp(id, "first-", 6) == 0);
    CHECK_OK(mql_consumer_member_id(b, id, sizeof id, NULL));
    CHECK(strncmp(id, "second-", 7) == 0);
    mql_consumer_free(a);
    mql_consumer_free(b);

    /* --- closing twice --- */
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    send_with_header(p, "zero");
    send_with_header(p, "one");
    CHECK_OK(mql_producer_close(p));
    CHECK_OK(mql_producer_close(p));
    CHECK_OK(mql_producer_close(p));
    CHECK_FAIL(mql_send(p, "t", NULL, 0, "x", 1, NULL), MQL_CLOSED, "closed");
    mql_producer_free(p);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_OK(mql_assign(c, "t", 0));
    CHECK_OK(mql_consumer_close(c));
    CHECK_OK(mql_consumer_close(c));
    mql_message *m = NULL;
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_CLOSED, "closed");
    mql_consumer_free(c);

    /* --- a consumer lent to a processor is freed only after it --- */
    CHECK_OK(mql_consumer_new(mq, "lent", NULL, &c));
    CHECK_OK(mql_assign(c, "t", 0));
    mql_processor *proc;
    CHECK_OK(mql_processor_new(c, NULL, &proc));
    mql_stopper *stopper;
    CHECK_OK(mql_processor_stopper(proc, &stopper));
    mql_consumer_free(c); /* refused: does nothing */
    CHECK(mql_last_error_code() == MQL_INVALID_ARGUMENT);
    CHECK(strstr(mql_last_error(), "processor") != NULL);
    mql_processor_free(proc);
    CHECK_OK(mql_stopper_stop(stopper)); /* the processor is gone: nothing happens */
    mql_stopper_free(stopper);
    CHECK_OK(mql_poll(c, 1000, &m)); /* the consumer is back, nothing skipped */
    CHECK(message_is(m, 0, "zero"));
    mql_message_free(m);
    mql_consumer_free(c); /* now it goes */

    /* --- messages, group infos, wakers and stoppers outlive their makers --- */
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_OK(mql_assign(c, "t", 0));
    mql_message *m0, *m1;
    CHECK_OK(mql_poll(c, 1000, &m0));
    CHECK_OK(mql_poll(c, 1000, &m1));
    CHECK_OK(mql_commit(c));
    mql_waker *w;
    CHECK_OK(mql_consumer_waker(c, &w));
    mql_group_info *g;
    CHECK_OK(mql_describe_group(mq, "g", &g));
    mql_consumer *pc;
    CHECK_OK(mql_consumer_new(mq, "proc", NULL, &pc));
    CHECK_OK(mql_assign(pc, "t", 0));
    CHECK_OK(mql_processor_new(pc, NULL, &proc));
    CHECK_OK(mql_processor_stopper(proc, &stopper));
    mql_consumer_free(c);
    CHECK_OK(mql_waker_wakeup(w)); /* the consumer is gone: nothing happens */
    /* Broker first, then everything made from it (any order). */
    CHECK_OK(mql_close(mq));
    CHECK(message_is(m0, 0, "zero"));
    CHECK(message_is(m1, 1, "one"));
    CHECK(strcmp(mql_group_info_name(g), "g") == 0);
    CHECK(mql_group_info_committed_count(g) == 1);
    mql_committed_offset co;
    CHECK_OK(mql_group_info_committed(g, 0, &co));
    CHECK(strcmp(co.topic, "t") == 0 && co.partition == 0 && co.offset == 2);
    mql_processor_stats st;
    CHECK_FAIL(mql_processor_run(proc, never, NULL, &st), MQL_CLOSED, "closed");
    /* A stop asked between runs ends the next one at once, before it
     * polls (so here, without noticing the close). */
    CHECK_OK(mql_stopper_stop(stopper));
    memset(&st, 0xFF, sizeof st);
    CHECK_OK(mql_processor_run(proc, never, NULL, &st));
    CHECK(st.processed == 0 && st.retries == 0 && st.failed == 0);
    CHECK_FAIL(mql_processor_run(proc, never, NULL, &st), MQL_CLOSED, "closed"); /* used up */
    mql_processor_free(proc);
    CHECK_OK(mql_stopper_stop(stopper));
    mql_consumer_free(pc);
    mql_message_free(m1);
    CHECK_OK(mql_waker_wakeup(w));
    mql_waker_free(w);
    mql_group_info_free(g);
    mql_stopper_free(stopper);
    CHECK(message_is(m0, 0, "zero")); /* still fine: each message is its own */
    mql_message_free(m0);

    /* --- the directory opens again: nothing was left holding it --- */
    mq = open_data(dir, "data");
    CHECK(end_of(mq, "t", 0) == 2);
    CHECK_OK(mql_close(mq));
    puts("lifetimes: ok");
    return 0;
}
