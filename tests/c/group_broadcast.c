/* Broadcast mode: every consumer of the group reads every partition, with
 * committed offsets of its own (stored under <group>.<client_id>), and
 * resumes from them; it is not a group member; it needs a group id. */
#include "check.h"

static mql_consumer *reader(mql_broker *mq, const char *client, bool auto_commit) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_broadcast(cc, true));
    CHECK_OK(mql_consumer_config_set_client_id(cc, client));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, auto_commit));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "bc", cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(c, "t"));
    return c;
}

/* Reads until nothing comes; returns how many messages. */
static int drain(mql_consumer *c) {
    int n = 0;
    mql_message *m;
    mql_status st;
    while ((st = mql_poll(c, 0, &m)) == MQL_OK) {
        n++;
        mql_message_free(m);
    }
    CHECK(st == MQL_TIMEOUT);
    return n;
}

static size_t committed_count(mql_broker *mq, const char *name) {
    mql_group_info *g;
    CHECK_OK(mql_describe_group(mq, name, &g));
    CHECK(mql_group_info_member_count(g) == 0); /* broadcast readers are not members */
    size_t n = mql_group_info_committed_count(g);
    mql_group_info_free(g);
    return n;
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 2);
    fill(mq, "t", 2, 3);

    /* Broadcast needs a group. */
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_broadcast(cc, true));
    mql_consumer *c = NULL;
    CHECK_FAIL(mql_consumer_new(mq, NULL, cc, &c), MQL_INVALID_ARGUMENT, "broadcast");
    CHECK(c == NULL);
    mql_consumer_config_free(cc);

    mql_consumer *one = reader(mq, "one", true), *two = reader(mq, "two", false);
    size_t n = 0;
    CHECK_OK(mql_assignment(one, NULL, 0, &n));
    CHECK(n == 2);
    CHECK_OK(mql_assignment(two, NULL, 0, &n));
    CHECK(n == 2);
    char id[32] = "x";
    CHECK_OK(mql_consumer_member_id(one, id, sizeof id, &n));
    CHECK(n == 0 && id[0] == '\0'); /* not a member */
    CHECK(drain(one) == 6);
    CHECK(drain(two) == 6); /* each reads everything */

    CHECK_OK(mql_commit(one));
    CHECK(committed_count(mq, "bc") == 0);
    /* A broadcast consumer's offsets are its own: `<group>+<client>`,
     * never the group `bc.one`. */
    CHECK(committed_count(mq, "bc+one") == 2);
    CHECK(committed_count(mq, "bc.one") == 0);
    CHECK(committed_count(mq, "bc+two") == 0);
    mql_consumer_free(one);
    mql_consumer_free(two);

    /* Each resumes at its own offsets: one committed 3 per partition, two
     * nothing. */
    fill(mq, "t", 2, 1);
    one = reader(mq, "one", true);
    two = reader(mq, "two", false);
    CHECK(drain(one) == 2);
    CHECK(drain(two) == 8);
    mql_consumer_free(one); /* auto-commit at free: 4 per partition */
    mql_consumer_free(two);

    /* A pattern subscription resumes there too. */
    fill(mq, "t", 2, 1);
    one = reader(mq, "one", true);
    CHECK_OK(mql_subscribe_pattern(one, "t|u"));
    CHECK(drain(one) == 2);
    mql_consumer_free(one);
    CHECK_OK(mql_close(mq));
    puts("group_broadcast: ok");
    return 0;
}
