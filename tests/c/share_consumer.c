/* Share consumers (job-queue consumption): two members of a share group
 * take disjoint messages and acknowledge them (one at a time and in a
 * batch); a released message comes back with delivery_count 2 (after its
 * delay, when it has one); rejected messages land on the default
 * dead-letter topic "<topic>.<group>.dlq" with their reason; settling after
 * the lock ran out, or twice, gives MQL_INVALID_RECORD_STATE; bad arguments
 * give typed errors and change nothing; a closed share consumer refuses
 * calls with MQL_CLOSED and its messages go to the other member. */
#include <time.h>

#include "check.h"

#define N 10

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const mql_message *view(const mql_share_message *m) {
    const mql_message *v = mql_share_message_message(m);
    CHECK(v != NULL);
    return v;
}

/* A share consumer of `group` subscribed to `topic`. */
static mql_share_consumer *member(mql_broker *mq, const char *group, const mql_share_consumer_config *cfg,
                                  const char *topic) {
    mql_share_consumer *sc = NULL;
    CHECK_OK(mql_share_consumer_new(mq, group, cfg, &sc));
    CHECK(sc != NULL);
    CHECK_OK(mql_share_subscribe(sc, topic));
    return sc;
}

/* Whether the header `name` of `m` has value `value`. */
static int header_is(const mql_message *m, const char *name, const char *value) {
    for (size_t i = 0; i < mql_message_header_count(m); i++) {
        const char *n;
        const void *v;
        size_t nl, vl;
        CHECK_OK(mql_message_header(m, i, &n, &nl, &v, &vl));
        if (nl == strlen(name) && memcmp(n, name, nl) == 0) return bytes_eq(v, vl, value);
    }
    return 0;
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "jobs", 2);
    fill(mq, "jobs", 2, N / 2);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));

    /* --- two members take disjoint messages --- */
    mql_share_consumer_config cfg = MQL_SHARE_CONSUMER_CONFIG_INIT;
    CHECK(cfg.client_id == NULL && cfg.lock_duration_ms == 30000 && cfg.max_deliveries == 5);
    CHECK(cfg.max_in_flight == 2000 && cfg.dead_letter_topic == NULL && cfg.max_poll_records == 500);
    CHECK(cfg.auto_offset_reset == MQL_OFFSET_RESET_EARLIEST && cfg.commit_acks == -1);
    cfg.max_poll_records = 1; /* each fetch takes one message: both members get some */
    mql_share_consumer *a = member(mq, "workers", &cfg, "jobs");
    cfg.client_id = "b";
    mql_share_consumer *b = member(mq, "workers", &cfg, "jobs");
    cfg.client_id = NULL;

    mql_share_message *got_a[N], *got_b[N];
    size_t na = 0, nb = 0;
    int seen[2][N / 2] = {{0}};
    for (;;) {
        mql_share_message *m = NULL;
        int any = 0;
        mql_status st = mql_share_poll(a, 200, &m);
        if (st == MQL_OK) {
            CHECK(na < N);
            got_a[na++] = m;
            any = 1;
        } else {
            CHECK(st == MQL_TIMEOUT && m == NULL);
        }
        m = NULL;
        st = mql_share_poll(b, 200, &m);
        if (st == MQL_OK) {
            CHECK(nb < N);
            got_b[nb++] = m;
            any = 1;
        } else {
            CHECK(st == MQL_TIMEOUT && m == NULL);
        }
        if (!any) break;
    }
    CHECK(na + nb == N && na > 0 && nb > 0);
    for (size_t i = 0; i < na + nb; i++) {
        const mql_share_message *m = i < na ? got_a[i] : got_b[i - na];
        const mql_message *v = view(m);
        uint32_t part = mql_message_partition(v);
        uint64_t off = mql_message_offset(v);
        CHECK(strcmp(mql_message_topic(v), "jobs") == 0 && part < 2 && off < N / 2);
        CHECK(seen[part][off] == 0); /* never given to both */
        seen[part][off] = 1;
        char want[32];
        snprintf(want, sizeof want, "%u:%llu", part, (unsigned long long)off);
        CHECK(value_is(v, want));
        CHECK(mql_share_message_delivery_count(m) == 1);
    }
    /* a settles one at a time, b all at once. */
    for (size_t i = 0; i < na; i++) CHECK_OK(mql_share_ack(a, got_a[i], MQL_ACK_ACCEPT));
    CHECK_OK(mql_share_ack_many(b, (const mql_share_message *const *)got_b, nb, MQL_ACK_ACCEPT));
    CHECK_OK(mql_share_ack_many(b, NULL, 0, MQL_ACK_ACCEPT)); /* nothing to do */
    /* Settled already: refused, all or nothing. */
    CHECK_FAIL(mql_share_ack(a, got_a[0], MQL_ACK_ACCEPT), MQL_INVALID_RECORD_STATE, "not held");
    CHECK_FAIL(mql_share_ack_many(b, (const mql_share_message *const *)got_b, nb, MQL_ACK_RELEASE),
               MQL_INVALID_RECORD_STATE, "not held");
    /* Another member's message is not this one's to settle. */
    CHECK_FAIL(mql_share_ack(a, got_b[0], MQL_ACK_ACCEPT), MQL_INVALID_RECORD_STATE, "not held");
    mql_share_consumer_stats sa, sb;
    CHECK_OK(mql_share_consumer_stats_get(a, &sa));
    CHECK_OK(mql_share_consumer_stats_get(b, &sb));
    CHECK(sa.acked == na && sb.acked == nb && sa.records == na && sb.records == nb);
    CHECK(sa.redelivered == 0 && sa.released == 0 && sa.rejected == 0 && sa.polls >= na);
    for (size_t i = 0; i < na; i++) mql_share_message_free(got_a[i]);
    for (size_t i = 0; i < nb; i++) mql_share_message_free(got_b[i]);
    mql_share_message *m = NULL;
    CHECK_STATUS(mql_share_poll(a, 0, &m), MQL_TIMEOUT); /* all acknowledged */
    CHECK_STATUS(mql_share_poll(b, 0, &m), MQL_TIMEOUT);
    CHECK(m == NULL);

    /* --- release: delivered again, delivery_count 2 --- */
    uint64_t off = send_to(p, "jobs", 0, "again");
    CHECK_OK(mql_share_poll(a, 1000, &m));
    CHECK(mql_message_offset(view(m)) == off && mql_share_message_delivery_count(m) == 1);
    CHECK_OK(mql_share_ack(a, m, MQL_ACK_RELEASE));
    mql_share_message_free(m);
    CHECK_OK(mql_share_poll(a, 1000, &m));
    CHECK(mql_message_offset(view(m)) == off && value_is(view(m), "again"));
    CHECK(mql_share_message_delivery_count(m) == 2);
    /* Renewing keeps it; a release with a delay hides it until then. */
    CHECK_OK(mql_share_ack(a, m, MQL_ACK_RENEW));
    CHECK_OK(mql_share_release(a, m, 300));
    mql_share_message_free(m);
    m = NULL;
    CHECK_STATUS(mql_share_poll(b, 0, &m), MQL_TIMEOUT);
    CHECK_OK(mql_share_poll(b, 3000, &m)); /* after the delay, to any member */
    CHECK(mql_message_offset(view(m)) == off && mql_share_message_delivery_count(m) == 3);
    CHECK_OK(mql_share_ack(b, m, MQL_ACK_ACCEPT));
    mql_share_message_free(m);
    CHECK_OK(mql_share_consumer_stats_get(a, &sa));
    CHECK(sa.released == 2 && sa.redelivered == 1);

    /* --- reject: to the dead-letter topic, with the reason --- */
    uint64_t bad = send_to(p, "jobs", 1, "bad");
    CHECK_OK(mql_share_poll(a, 1000, &m));
    CHECK(mql_message_offset(view(m)) == bad);
    CHECK_OK(mql_share_reject(a, m, "cannot parse"));
    CHECK_FAIL(mql_share_ack(a, m, MQL_ACK_ACCEPT), MQL_INVALID_RECORD_STATE, "not held");
    mql_share_message_free(m);
    uint64_t worse = send_to(p, "jobs", 1, "worse");
    CHECK_OK(mql_share_poll(a, 1000, &m));
    CHECK(mql_message_offset(view(m)) == worse);
    CHECK_OK(mql_share_ack(a, m, MQL_ACK_REJECT));
    mql_share_message_free(m);
    mql_message *dead = read_at(mq, "jobs.workers.dlq", 0, 0);
    CHECK(value_is(dead, "bad") && header_is(dead, "mqlite.dlq.reason", "cannot parse"));
    CHECK(header_is(dead, "mqlite.dlq.topic", "jobs"));
    mql_message_free(dead);
    dead = read_at(mq, "jobs.workers.dlq", 0, 1);
    CHECK(value_is(dead, "worse") && header_is(dead, "mqlite.dlq.reason", "rejected"));
    mql_message_free(dead);
    CHECK_OK(mql_share_consumer_stats_get(a, &sa));
    CHECK(sa.rejected == 2 && sa.dead_lettered == 2);
    CHECK_STATUS(mql_share_poll(a, 0, &m), MQL_TIMEOUT); /* never delivered again */

    /* --- the lock runs out --- */
    make_topic(mq, "slow", 1);
    mql_share_consumer_config quick = MQL_SHARE_CONSUMER_CONFIG_INIT;
    quick.lock_duration_ms = 200;
    quick.commit_acks = 1;
    mql_share_consumer *s = member(mq, "slow-workers", &quick, "slow");
    send_to(p, "slow", 0, "late");
    CHECK_OK(mql_share_poll(s, 1000, &m));
    sleep_ms(300);
    CHECK_FAIL(mql_share_ack(s, m, MQL_ACK_ACCEPT), MQL_INVALID_RECORD_STATE, "lock ran out");
    CHECK(mql_last_error_code() == MQL_INVALID_RECORD_STATE);
    mql_share_message_free(m);
    CHECK_OK(mql_share_poll(s, 1000, &m)); /* delivered again */
    CHECK(value_is(view(m), "late") && mql_share_message_delivery_count(m) == 2);
    CHECK_OK(mql_share_ack(s, m, MQL_ACK_ACCEPT));
    mql_share_message_free(m);
    CHECK_OK(mql_share_consumer_stats_get(s, &sa));
    CHECK(sa.expired == 1 && sa.acked == 1);
    mql_share_consumer_free(s);

    /* --- taken together, handed out while half their lock is left --- */
    make_topic(mq, "queued", 1);
    fill(mq, "queued", 1, 3);
    quick.lock_duration_ms = 1000; /* one fetch takes all three */
    s = member(mq, "queue", &quick, "queued");
    mql_share_message *q0, *q1, *q2;
    CHECK_OK(mql_share_poll(s, 1000, &q0));
    sleep_ms(600);
    /* Half the lock ran: offsets 1 and 2 went back to the group, their
     * delivery not counted, and were taken anew. */
    CHECK_OK(mql_share_poll(s, 0, &q1));
    CHECK(mql_message_offset(view(q1)) == 1 && mql_share_message_delivery_count(q1) == 1);
    sleep_ms(600); /* 1200 ms after the first take, 600 after the second */
    CHECK_OK(mql_share_ack(s, q1, MQL_ACK_ACCEPT));
    CHECK_FAIL(mql_share_ack(s, q0, MQL_ACK_ACCEPT), MQL_INVALID_RECORD_STATE, "lock ran out");
    /* Next: offset 0 again (its lock ran out: a second delivery) and
     * offset 2 (given back uncounted once more: still its first). */
    int taken = 0;
    for (int i = 0; i < 2; i++) {
        CHECK_OK(mql_share_poll(s, 1000, &q2));
        uint64_t off = mql_message_offset(view(q2));
        uint32_t count = mql_share_message_delivery_count(q2);
        CHECK((off == 0 && count == 2) || (off == 2 && count == 1));
        taken |= 1 << off;
        CHECK_OK(mql_share_ack(s, q2, MQL_ACK_ACCEPT));
        mql_share_message_free(q2);
    }
    CHECK(taken == 5);
    CHECK_STATUS(mql_share_poll(s, 0, &q2), MQL_TIMEOUT);
    mql_share_message_free(q0);
    mql_share_message_free(q1);
    mql_share_consumer_free(s);

    /* --- bad arguments: typed errors, nothing changes --- */
    mql_share_consumer *x = NULL;
    CHECK_FAIL(mql_share_consumer_new(NULL, "g", NULL, &x), MQL_NULL_ARGUMENT, "`broker` is NULL");
    CHECK_FAIL(mql_share_consumer_new(mq, NULL, NULL, &x), MQL_NULL_ARGUMENT, "`group` is NULL");
    CHECK_FAIL(mql_share_consumer_new(mq, "g", NULL, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK_FAIL(mql_share_consumer_new(mq, "no spaces", NULL, &x), MQL_INVALID_ARGUMENT, "no spaces");
    mql_share_consumer_config bad_cfg = MQL_SHARE_CONSUMER_CONFIG_INIT;
    bad_cfg.lock_duration_ms = 0;
    CHECK_FAIL(mql_share_consumer_new(mq, "g", &bad_cfg, &x), MQL_INVALID_ARGUMENT, "lock_duration_ms");
    bad_cfg = (mql_share_consumer_config)MQL_SHARE_CONSUMER_CONFIG_INIT;
    bad_cfg.auto_offset_reset = MQL_OFFSET_RESET_ERROR;
    CHECK_FAIL(mql_share_consumer_new(mq, "g", &bad_cfg, &x), MQL_INVALID_ARGUMENT, "auto_offset_reset");
    bad_cfg = (mql_share_consumer_config)MQL_SHARE_CONSUMER_CONFIG_INIT;
    bad_cfg.commit_acks = 2;
    CHECK_FAIL(mql_share_consumer_new(mq, "g", &bad_cfg, &x), MQL_INVALID_ARGUMENT, "acks");
    bad_cfg = (mql_share_consumer_config)MQL_SHARE_CONSUMER_CONFIG_INIT;
    bad_cfg.client_id = "a b";
    CHECK_FAIL(mql_share_consumer_new(mq, "g", &bad_cfg, &x), MQL_INVALID_ARGUMENT, "client_id");
    bad_cfg = (mql_share_consumer_config)MQL_SHARE_CONSUMER_CONFIG_INIT;
    bad_cfg.max_deliveries = 3; /* the group's members open here use 5 */
    CHECK_FAIL(mql_share_consumer_new(mq, "workers", &bad_cfg, &x), MQL_INVALID_ARGUMENT, "must agree");
    CHECK(x == NULL);
    CHECK_OK(mql_share_consumer_new(mq, "fresh", NULL, &x)); /* NULL config: the defaults */
    CHECK_FAIL(mql_share_poll(x, 0, &m), MQL_INVALID_ARGUMENT, "no subscription");
    CHECK_FAIL(mql_share_subscribe(x, "no/slash"), MQL_INVALID_TOPIC_NAME, "no/slash");
    const char *topics[2] = {"jobs", NULL};
    CHECK_FAIL(mql_share_subscribe_many(x, topics, 2), MQL_NULL_ARGUMENT, "`topics[1]` is NULL");
    CHECK_FAIL(mql_share_poll(x, 0, &m), MQL_INVALID_ARGUMENT, "no subscription"); /* unchanged */
    topics[1] = "slow";
    CHECK_OK(mql_share_subscribe_many(x, topics, 2));
    CHECK_OK(mql_share_poll(x, 1000, &m)); /* a new group starts at the earliest offset */
    CHECK_FAIL(mql_share_ack(NULL, m, MQL_ACK_ACCEPT), MQL_NULL_ARGUMENT, "`consumer` is NULL");
    CHECK_FAIL(mql_share_ack(x, NULL, MQL_ACK_ACCEPT), MQL_NULL_ARGUMENT, "`message` is NULL");
    CHECK_FAIL(mql_share_ack(x, m, 9), MQL_INVALID_ARGUMENT, "mql_ack_type");
    CHECK_FAIL(mql_share_reject(x, m, NULL), MQL_NULL_ARGUMENT, "`reason` is NULL");
    const mql_share_message *some[2] = {m, NULL};
    CHECK_FAIL(mql_share_ack_many(x, some, 2, MQL_ACK_ACCEPT), MQL_NULL_ARGUMENT, "`messages[1]` is NULL");
    CHECK_FAIL(mql_share_ack_many(x, NULL, 1, MQL_ACK_ACCEPT), MQL_NULL_ARGUMENT, "`messages` is NULL");
    CHECK_FAIL(mql_share_poll(NULL, 0, &m), MQL_NULL_ARGUMENT, "`consumer` is NULL");
    CHECK_FAIL(mql_share_poll(x, 0, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK_FAIL(mql_share_consumer_stats_get(x, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK(mql_share_message_message(NULL) == NULL && mql_share_message_delivery_count(NULL) == 0);
    CHECK_OK(mql_share_ack(x, m, MQL_ACK_ACCEPT)); /* none of the above changed it */
    mql_share_message_free(m);
    mql_share_message_free(NULL);
    mql_share_consumer_free(x);
    mql_share_consumer_free(NULL);

    /* --- close: calls refused, the messages held go to the other member --- */
    uint64_t held = send_to(p, "jobs", 0, "held");
    CHECK_OK(mql_share_poll(a, 1000, &m));
    CHECK(mql_message_offset(view(m)) == held);
    CHECK_OK(mql_share_consumer_close(a));
    CHECK_OK(mql_share_consumer_close(a)); /* again: nothing */
    CHECK_FAIL(mql_share_ack(a, m, MQL_ACK_ACCEPT), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_share_release(a, m, 0), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_share_reject(a, m, "r"), MQL_CLOSED, "closed");
    const mql_share_message *one[1] = {m};
    CHECK_FAIL(mql_share_ack_many(a, one, 1, MQL_ACK_ACCEPT), MQL_CLOSED, "closed");
    mql_share_message *none = NULL;
    CHECK_FAIL(mql_share_poll(a, 0, &none), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_share_subscribe(a, "jobs"), MQL_CLOSED, "closed");
    CHECK(none == NULL);
    CHECK_OK(mql_share_consumer_stats_get(a, &sa)); /* still readable */
    CHECK(value_is(view(m), "held")); /* the message stays readable */
    mql_share_message *m2 = NULL;
    CHECK_OK(mql_share_poll(b, 1000, &m2));
    CHECK(mql_message_offset(view(m2)) == held && mql_share_message_delivery_count(m2) == 2);
    CHECK_OK(mql_share_ack(b, m2, MQL_ACK_ACCEPT));
    mql_share_message_free(m2);
    mql_share_message_free(m);
    mql_share_consumer_free(a);
    mql_share_consumer_free(b);

    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    puts("share_consumer: ok");
    return 0;
}
