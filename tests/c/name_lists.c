/* mql_topics, mql_groups and mql_damaged: sorted names in a list the
 * caller frees; groups with committed offsets or members are listed (a
 * group that was only described is not), and both survive a reopen as the
 * files say; a damaged topic or group is listed, and by mql_damaged too. */
#include "check.h"

static void expect_names(mql_name_list *list, const char **want, size_t n) {
    CHECK(mql_name_list_len(list) == n);
    for (size_t i = 0; i < n; i++) {
        const char *got = mql_name_list_get(list, i);
        CHECK(got != NULL);
        if (strcmp(got, want[i]) != 0) FAIL_AT("name %zu is \"%s\", want \"%s\"", i, got, want[i]);
    }
    CHECK(mql_name_list_get(list, n) == NULL);
    CHECK(mql_name_list_get(NULL, 0) == NULL);
    CHECK(mql_name_list_len(NULL) == 0);
    mql_name_list_free(list);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    mql_name_list *list;
    CHECK_OK(mql_topics(mq, &list));
    expect_names(list, NULL, 0);
    make_topic(mq, "zeta", 1);
    make_topic(mq, "alpha", 2);
    fill(mq, "alpha", 2, 3);
    CHECK_OK(mql_topics(mq, &list));
    expect_names(list, (const char *[]){"alpha", "zeta"}, 2);

    /* Described only: not a group in use. */
    mql_group_info *gi;
    CHECK_OK(mql_describe_group(mq, "nobody", &gi));
    mql_group_info_free(gi);
    CHECK_OK(mql_groups(mq, &list));
    expect_names(list, NULL, 0);

    /* A member (no commit yet), and a group that committed. */
    mql_consumer *member, *committer;
    CHECK_OK(mql_consumer_new(mq, "members", NULL, &member));
    CHECK_OK(mql_subscribe(member, "alpha"));
    CHECK_OK(mql_consumer_new(mq, "billing", NULL, &committer));
    CHECK_OK(mql_assign(committer, "alpha", 0));
    mql_message *m;
    CHECK_OK(mql_poll(committer, 5000, &m));
    mql_message_free(m);
    CHECK_OK(mql_commit(committer));
    CHECK_OK(mql_groups(mq, &list));
    expect_names(list, (const char *[]){"billing", "members"}, 2);

    /* The member leaves: only the group with committed offsets remains,
     * also after a reopen. */
    mql_consumer_free(member);
    mql_consumer_free(committer);
    CHECK_OK(mql_groups(mq, &list));
    expect_names(list, (const char *[]){"billing"}, 1);
    CHECK_OK(mql_close(mq));
    mq = open_data(dir, "data");
    CHECK_OK(mql_groups(mq, &list));
    expect_names(list, (const char *[]){"billing"}, 1);
    CHECK_OK(mql_topics(mq, &list));
    expect_names(list, (const char *[]){"alpha", "zeta"}, 2);

    CHECK_OK(mql_damaged(mq, &list));
    expect_names(list, NULL, 0);

    /* Damaged files take down only what they belong to. */
    CHECK_OK(mql_close(mq));
    char path[4400];
    snprintf(path, sizeof path, "%s/data/topics/zeta/topic.json", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL && fputs("{ not json", f) >= 0 && fclose(f) == 0);
    snprintf(path, sizeof path, "%s/data/groups/billing.offsets", dir);
    f = fopen(path, "w");
    CHECK(f != NULL && fputs("[", f) >= 0 && fclose(f) == 0);
    mq = open_data(dir, "data");
    CHECK_OK(mql_topics(mq, &list));
    expect_names(list, (const char *[]){"alpha", "zeta"}, 2);
    CHECK_OK(mql_groups(mq, &list));
    expect_names(list, (const char *[]){"billing"}, 1);
    CHECK_OK(mql_damaged(mq, &list));
    expect_names(list, (const char *[]){"group:billing", "topic:zeta"}, 2);
    uint32_t count = 0;
    CHECK_FAIL(mql_topic_partition_count(mq, "zeta", &count), MQL_CORRUPT, "topic.json");
    CHECK_OK(mql_topic_partition_count(mq, "alpha", &count));
    CHECK(count == 2);
    mql_consumer *damaged_group = NULL;
    CHECK_FAIL(mql_consumer_new(mq, "billing", NULL, &damaged_group), MQL_CORRUPT, "billing.offsets");
    CHECK(damaged_group == NULL);
    CHECK_OK(mql_topic_delete(mq, "zeta"));
    CHECK_OK(mql_damaged(mq, &list));
    expect_names(list, (const char *[]){"group:billing"}, 1);

    /* Bad arguments: typed errors, nothing written. */
    list = (mql_name_list *)&list;
    CHECK_FAIL(mql_topics(NULL, &list), MQL_NULL_ARGUMENT, "broker");
    CHECK_FAIL(mql_groups(mq, NULL), MQL_NULL_ARGUMENT, "out");
    CHECK_FAIL(mql_damaged(NULL, &list), MQL_NULL_ARGUMENT, "broker");
    CHECK(list == (mql_name_list *)&list);
    mql_name_list_free(NULL);

    CHECK_OK(mql_close(mq));
    puts("name_lists: ok");
    return 0;
}
