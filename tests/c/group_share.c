/* Two consumers of one group share a topic's partitions: each partition has
 * at most one owner at any moment (exactly one once both polled, checked
 * with mql_describe_group), every record is read once by the group, and
 * when a member closes, with messages fetched but not yet handed out, the
 * other takes over exactly after the last message the closed one handed
 * out (auto-commit at close commits what C saw, not what was fetched). */
#include "check.h"

#define PARTITIONS 4

static int seen[PARTITIONS][64];

/* Checks the group's owners: no partition owned twice; with `all`, every
 * partition owned. Returns how many partitions `member` owns (by id). */
static size_t check_owners(mql_broker *mq, const char *member, int all) {
    mql_group_info *g;
    CHECK_OK(mql_describe_group(mq, "g", &g));
    CHECK(strcmp(mql_group_info_name(g), "g") == 0);
    int owned[PARTITIONS] = {0};
    size_t mine = 0;
    for (size_t i = 0; i < mql_group_info_member_count(g); i++) {
        const char *id;
        size_t n;
        CHECK_OK(mql_group_info_member(g, i, &id, &n));
        for (size_t j = 0; j < n; j++) {
            mql_topic_partition tp;
            CHECK_OK(mql_group_info_member_partition(g, i, j, &tp));
            CHECK(strcmp(tp.topic, "t") == 0 && tp.partition < PARTITIONS);
            owned[tp.partition]++;
            CHECK(owned[tp.partition] == 1); /* never two owners */
        }
        if (member != NULL && strcmp(id, member) == 0) mine = n;
    }
    if (all)
        for (int p = 0; p < PARTITIONS; p++) CHECK(owned[p] == 1);
    mql_group_info_free(g);
    return mine;
}

/* Polls `c` once (no wait); records what it got. Returns 1 if it got one. */
static int take(mql_consumer *c) {
    mql_message *m;
    mql_status st = mql_poll(c, 0, &m);
    if (st == MQL_TIMEOUT) return 0;
    CHECK_OK(st);
    uint32_t p = mql_message_partition(m);
    uint64_t o = mql_message_offset(m);
    CHECK(p < PARTITIONS && o < 64);
    seen[p][o]++;
    mql_message_free(m);
    return 1;
}

static void member_id(mql_consumer *c, char *buf, size_t len) {
    size_t n;
    CHECK_OK(mql_consumer_member_id(c, buf, len, &n));
    CHECK(n > 0 && n < len);
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", PARTITIONS);
    fill(mq, "t", PARTITIONS, 10);

    mql_consumer *a, *b;
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &a));
    CHECK_OK(mql_subscribe(a, "t"));
    char id_a[64], id_b[64];
    member_id(a, id_a, sizeof id_a);
    CHECK(strncmp(id_a, "consumer-", 9) == 0);
    size_t n = 0;
    CHECK_OK(mql_assignment(a, NULL, 0, &n));
    CHECK(n == PARTITIONS); /* alone, it gets everything */
    CHECK(check_owners(mq, id_a, 1) == PARTITIONS);

    CHECK_OK(mql_consumer_new(mq, "g", NULL, &b));
    CHECK_OK(mql_subscribe(b, "t"));
    member_id(b, id_b, sizeof id_b);
    CHECK(strcmp(id_a, id_b) != 0);
    /* b's share is still a's until a fetches and revokes it. */
    CHECK(check_owners(mq, id_b, 1) == 0);

    /* Both read until neither gets anything; the owners are checked after
     * every step. */
    for (int idle = 0; idle < 2;) {
        int got = take(a);
        check_owners(mq, NULL, 0);
        got += take(b);
        check_owners(mq, NULL, 0);
        idle = got ? 0 : idle + 1;
    }
    CHECK(check_owners(mq, id_a, 1) == 2);
    CHECK(check_owners(mq, id_b, 1) == 2);
    mql_topic_partition mine[PARTITIONS];
    CHECK_OK(mql_assignment(a, mine, PARTITIONS, &n));
    CHECK(n == 2);
    for (int p = 0; p < PARTITIONS; p++)
        for (int o = 0; o < 10; o++) CHECK(seen[p][o] == 1); /* each read once */

    /* New records; a hands out only 3 of those it fetches, then closes.
     * Auto-commit at close commits exactly those 3: b goes on after them. */
    fill(mq, "t", PARTITIONS, 10);
    int handed = 0;
    while (handed < 3) handed += take(a);
    mql_consumer_stats stats;
    CHECK_OK(mql_consumer_get_stats(a, &stats));
    CHECK(stats.records == 20 + 3); /* handed out, not fetched */
    CHECK(stats.rebalances >= 1);
    CHECK_OK(mql_consumer_close(a));
    CHECK_OK(mql_consumer_close(a)); /* again: nothing */
    check_owners(mq, NULL, 0);
    for (int idle = 0; idle < 2;) idle = take(b) ? 0 : idle + 1;
    CHECK(check_owners(mq, id_b, 1) == PARTITIONS); /* a left: b owns all */
    for (int p = 0; p < PARTITIONS; p++)
        for (int o = 0; o < 20; o++)
            if (seen[p][o] != 1) FAIL_AT("t/%d@%d read %d times", p, o, seen[p][o]);

    mql_group_info *g;
    CHECK_OK(mql_describe_group(mq, "g", &g));
    CHECK(mql_group_info_member_count(g) == 1);
    CHECK(mql_group_info_generation(g) >= 3);
    /* a committed its two partitions at close (auto-commit). */
    CHECK(mql_group_info_committed_count(g) == 2);
    for (size_t i = 0; i < 2; i++) {
        mql_committed_offset co;
        CHECK_OK(mql_group_info_committed(g, i, &co));
        CHECK(strcmp(co.topic, "t") == 0 && co.metadata != NULL && co.metadata[0] == '\0');
        CHECK(co.offset >= 10 && co.offset <= 13 && co.timestamp > 0);
    }
    mql_group_info_free(g);

    mql_consumer_free(a);
    mql_consumer_free(b);
    CHECK_OK(mql_close(mq));
    puts("group_share: ok");
    return 0;
}
