/* A processor with max_retries and a dead_letter_topic: a message whose
 * handler keeps failing goes to the dead-letter topic, with headers saying
 * where it came from and why, and is committed past; the others are
 * processed; the stats count it in failed and dead_lettered. */
#include <string.h>

#include "check.h"

typedef struct {
    int calls;
    mql_stopper *stopper;
} state;

static bool handle(void *user_data, const mql_message *m) {
    state *s = user_data;
    /* 9 messages processed and 2 tries of offset 4 (max_retries 1). */
    if (++s->calls == 11) CHECK_OK(mql_stopper_stop(s->stopper));
    return mql_message_offset(m) != 4;
}

/* The value of header `name` of `m`, NUL-terminated into `buf`. */
static const char *header(const mql_message *m, const char *name, char *buf, size_t cap) {
    buf[0] = '\0';
    for (size_t i = 0; i < mql_message_header_count(m); i++) {
        const char *n;
        size_t nlen, vlen;
        const void *v;
        CHECK_OK(mql_message_header(m, i, &n, &nlen, &v, &vlen));
        if (nlen == strlen(name) && memcmp(n, name, nlen) == 0 && vlen < cap) {
            memcpy(buf, v, vlen);
            buf[vlen] = '\0';
        }
    }
    return buf;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 1);
    fill(mq, "t", 1, 10);

    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, false));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_assign(c, "t", 0));

    mql_processor_config pc = MQL_PROCESSOR_CONFIG_INIT;
    pc.threads = 1;
    pc.retry_backoff_ms = 1;
    pc.max_retries = 1;
    pc.dead_letter_topic = "t.dlq";
    mql_processor *proc;
    CHECK_OK(mql_processor_new(c, &pc, &proc));
    state s = {0, NULL};
    CHECK_OK(mql_processor_stopper(proc, &s.stopper));
    mql_processor_stats st;
    CHECK_OK(mql_processor_run(proc, handle, &s, &st));
    CHECK(st.processed == 9 && st.retries == 1 && st.failed == 1 && st.dead_lettered == 1);
    mql_stopper_free(s.stopper);
    mql_processor_free(proc);
    uint64_t committed = 0;
    CHECK_OK(mql_committed(c, "t", 0, &committed, NULL, 0, NULL));
    CHECK(committed == 10); /* past the dead letter */
    mql_consumer_free(c);

    mql_consumer *dl;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &dl));
    CHECK_OK(mql_assign(dl, "t.dlq", 0));
    mql_message *m;
    CHECK_OK(mql_poll(dl, 5000, &m));
    char buf[64];
    CHECK(strcmp(header(m, "mqlite.dlq.topic", buf, sizeof buf), "t") == 0);
    CHECK(strcmp(header(m, "mqlite.dlq.partition", buf, sizeof buf), "0") == 0);
    CHECK(strcmp(header(m, "mqlite.dlq.offset", buf, sizeof buf), "4") == 0);
    CHECK(strcmp(header(m, "mqlite.dlq.deliveries", buf, sizeof buf), "2") == 0);
    CHECK(strstr(header(m, "mqlite.dlq.reason", buf, sizeof buf), "2 times") != NULL);
    mql_message_free(m);
    CHECK_STATUS(mql_poll(dl, 0, &m), MQL_TIMEOUT); /* only that one */
    mql_consumer_free(dl);
    CHECK_OK(mql_close(mq));
    puts("processor_dead_letters: ok");
    return 0;
}
