/* Pattern subscriptions, standalone and in a group: topics matching the
 * whole expression are read, including ones created later; others are
 * not; an invalid expression is MQL_INVALID_ARGUMENT and changes nothing. */
#include "check.h"

static mql_producer *producer;

/* The value of the next message, into buf. */
static void next_value(mql_consumer *c, char *buf, size_t size) {
    mql_message *m;
    CHECK_OK(mql_poll(c, 1000, &m));
    size_t len;
    const char *v = mql_message_value(m, &len);
    CHECK(len < size);
    memcpy(buf, v, len);
    buf[len] = '\0';
    mql_message_free(m);
}

static void run(mql_broker *mq, const char *group, const char *prefix) {
    char a[32], b[32], digit[32], pattern[64];
    snprintf(a, sizeof a, "%s-a", prefix);
    snprintf(b, sizeof b, "%s-b", prefix);
    snprintf(digit, sizeof digit, "%s-1", prefix);
    snprintf(pattern, sizeof pattern, "%s-[a-z]+", prefix);
    make_topic(mq, a, 1);
    make_topic(mq, digit, 1);
    send_to(producer, a, 0, "a1");

    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, group, NULL, &c));
    CHECK_FAIL(mql_subscribe_pattern(c, "evt-("), MQL_INVALID_ARGUMENT, "pattern");
    mql_message *m = NULL;
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_INVALID_ARGUMENT, "no subscription"); /* nothing changed */
    CHECK_OK(mql_subscribe_pattern(c, pattern));
    size_t n = 0;
    mql_topic_partition tp[4];
    CHECK_OK(mql_assignment(c, tp, 4, &n));
    CHECK(n == 1 && strcmp(tp[0].topic, a) == 0);
    char v[32];
    next_value(c, v, sizeof v);
    CHECK(strcmp(v, "a1") == 0);
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_TIMEOUT);

    /* A new matching topic is picked up; "<prefix>-1" and "other" do not
     * match. */
    make_topic(mq, b, 1);
    send_to(producer, b, 0, "new");
    send_to(producer, "other", 0, "no");
    send_to(producer, digit, 0, "no");
    next_value(c, v, sizeof v);
    CHECK(strcmp(v, "new") == 0);
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_TIMEOUT);
    CHECK_OK(mql_assignment(c, tp, 4, &n));
    CHECK(n == 2);

    /* A plain subscription replaces the pattern; so does an assignment. */
    CHECK_OK(mql_subscribe(c, "other"));
    CHECK_OK(mql_assignment(c, tp, 4, &n));
    CHECK(n == 1 && strcmp(tp[0].topic, "other") == 0);
    CHECK_OK(mql_subscribe_pattern(c, pattern));
    CHECK_OK(mql_assign(c, digit, 0));
    CHECK_OK(mql_assignment(c, tp, 4, &n));
    CHECK(n == 1 && strcmp(tp[0].topic, digit) == 0);
    mql_consumer_free(c);
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "other", 1);
    CHECK_OK(mql_producer_new(mq, NULL, &producer));
    run(mq, NULL, "evt");  /* standalone */
    run(mq, "pg", "grp");  /* a group member: the group rebalances */
    mql_producer_free(producer);
    CHECK_OK(mql_close(mq));
    puts("group_pattern: ok");
    return 0;
}
