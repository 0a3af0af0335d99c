/* Rebalance callbacks: a member is told of a revoke before the other member
 * is told of the assign; a commit inside the revoke callback (auto-commit
 * off) is what the new owner starts from; the callback may call the
 * documented functions on its consumer and is refused the others; close
 * and unsubscribe revoke too. */
#include "check.h"

static char events[32][128];
static int n_events;

struct member {
    const char *name;
    int commit_on_revoke;
    uint64_t assigned_position[2]; /* position seen in the assign callback */
};

static void log_event(const char *fmt, const char *name, int event, const mql_topic_partition *parts, size_t n) {
    CHECK(n_events < 32);
    char *line = events[n_events++];
    int len = snprintf(line, 128, fmt, name, event == MQL_REBALANCE_ASSIGN ? "assign" : "revoke");
    for (size_t i = 0; i < n; i++) len += snprintf(line + len, 128 - len, " %s/%u", parts[i].topic, parts[i].partition);
}

static void on_rebalance(void *user_data, mql_consumer *c, mql_rebalance_event event,
                         const mql_topic_partition *parts, size_t n) {
    struct member *me = user_data;
    CHECK(event == MQL_REBALANCE_ASSIGN || event == MQL_REBALANCE_REVOKE);
    CHECK(n > 0 && parts != NULL);
    log_event("%s %s", me->name, event, parts, n);

    /* Calls that would re-enter the consumer's machinery are refused. */
    mql_message *m = NULL;
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_INVALID_ARGUMENT, "rebalance callback");
    CHECK(m == NULL);
    CHECK_FAIL(mql_subscribe(c, "t"), MQL_INVALID_ARGUMENT, "rebalance callback");
    CHECK_FAIL(mql_subscribe_pattern(c, "t"), MQL_INVALID_ARGUMENT, "rebalance callback");
    CHECK_FAIL(mql_assign(c, "t", 0), MQL_INVALID_ARGUMENT, "rebalance callback");
    CHECK_FAIL(mql_unsubscribe(c), MQL_INVALID_ARGUMENT, "rebalance callback");
    CHECK_FAIL(mql_consumer_close(c), MQL_INVALID_ARGUMENT, "rebalance callback");
    mql_consumer_free(c); /* refused: does nothing */
    CHECK(mql_last_error_code() == MQL_INVALID_ARGUMENT);

    /* The others work. */
    char id[64];
    size_t id_len;
    CHECK_OK(mql_consumer_member_id(c, id, sizeof id, &id_len));
    CHECK(id_len > 0);
    mql_consumer_stats stats;
    CHECK_OK(mql_consumer_get_stats(c, &stats));
    size_t count;
    CHECK_OK(mql_assignment(c, NULL, 0, &count));
    mql_waker *w;
    CHECK_OK(mql_consumer_waker(c, &w));
    mql_waker_free(w);
    if (event == MQL_REBALANCE_ASSIGN) {
        CHECK(count >= n); /* already part of the assignment */
        for (size_t i = 0; i < n; i++) {
            uint64_t pos, lag;
            CHECK_OK(mql_position(c, parts[i].topic, parts[i].partition, &pos));
            CHECK_OK(mql_lag(c, parts[i].topic, parts[i].partition, &lag));
            me->assigned_position[parts[i].partition] = pos;
        }
    } else {
        /* Still owned during the revoke: the commit goes through. */
        if (me->commit_on_revoke) CHECK_OK(mql_commit(c));
        uint64_t committed;
        CHECK_OK(mql_committed(c, parts[0].topic, parts[0].partition, &committed, NULL, 0, NULL));
    }
}

static mql_consumer *member(mql_broker *mq, struct member *me) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, false));
    CHECK_OK(mql_consumer_config_set_max_poll_records(cc, 2)); /* one per partition per fetch */
    CHECK_OK(mql_consumer_config_set_client_id(cc, me->name));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_consumer_set_rebalance_callback(c, on_rebalance, me));
    CHECK_OK(mql_subscribe(c, "t"));
    return c;
}

static int has_event(const char *line) {
    for (int i = 0; i < n_events; i++)
        if (strcmp(events[i], line) == 0) return 1;
    return 0;
}

static int find(const char *line) {
    for (int i = 0; i < n_events; i++)
        if (strcmp(events[i], line) == 0) return i;
    FAIL_AT("no event \"%s\"", line);
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 2);
    fill(mq, "t", 2, 5);

    struct member one = {"one", 1, {99, 99}}, two = {"two", 0, {99, 99}};
    mql_consumer *a = member(mq, &one);
    CHECK(n_events == 1 && strcmp(events[0], "one assign t/0 t/1") == 0); /* inside mql_subscribe */
    CHECK(one.assigned_position[0] == 0 && one.assigned_position[1] == 0);

    /* a reads two per fetch: after 4, its buffer is empty at t/0@2, t/1@2. */
    mql_message *m;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(mql_poll(a, 0, &m));
        CHECK(mql_message_offset(m) < 2);
        mql_message_free(m);
    }

    mql_consumer *b = member(mq, &two);
    CHECK(n_events == 1); /* nothing free for b yet */
    /* a's next fetch revokes t/1 (committing inside the callback), then
     * reads on in t/0. */
    CHECK_OK(mql_poll(a, 0, &m));
    CHECK(mql_message_partition(m) == 0 && mql_message_offset(m) == 2);
    mql_message_free(m);
    CHECK(n_events == 2 && strcmp(events[1], "one revoke t/1") == 0);
    uint64_t committed = 0;
    CHECK_OK(mql_committed(a, "t", 1, &committed, NULL, 0, NULL));
    CHECK(committed == 2);

    /* b takes t/1 from the committed offset. */
    CHECK_OK(mql_poll(b, 0, &m));
    CHECK(mql_message_partition(m) == 1 && mql_message_offset(m) == 2);
    mql_message_free(m);
    CHECK(find("one revoke t/1") < find("two assign t/1"));
    CHECK(two.assigned_position[1] == 2);

    /* b closes: revoke (no commit: its auto-commit is off), then a gets
     * t/1 back at the offset one committed. */
    CHECK_OK(mql_consumer_close(b));
    CHECK(strcmp(events[n_events - 1], "two revoke t/1") == 0);
    /* a hands out what it fetched before, then fetches: t/1 comes back. */
    for (int i = 0; i < 5 && !has_event("one assign t/1"); i++) {
        CHECK_OK(mql_poll(a, 0, &m));
        mql_message_free(m);
    }
    CHECK(find("two revoke t/1") < find("one assign t/1"));
    CHECK(one.assigned_position[1] == 2);

    /* Unsubscribing revokes everything (and commits, in the callback). */
    int before = n_events;
    CHECK_OK(mql_unsubscribe(a));
    CHECK(n_events == before + 1 && strncmp(events[before], "one revoke", 10) == 0);
    size_t count = 99;
    CHECK_OK(mql_assignment(a, NULL, 0, &count));
    CHECK(count == 0);

    /* Removing the callback: no more events. */
    CHECK_OK(mql_consumer_set_rebalance_callback(a, NULL, NULL));
    CHECK_OK(mql_subscribe(a, "t"));
    CHECK(n_events == before + 1);

    for (int i = 0; i < n_events; i++) printf("%s\n", events[i]);
    mql_consumer_free(a);
    mql_consumer_free(b);
    CHECK_OK(mql_close(mq));
    puts("group_rebalance: ok");
    return 0;
}
