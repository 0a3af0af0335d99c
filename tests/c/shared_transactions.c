/* Transactions from several processes on one shared data directory,
 * through the C API: children made with fork() each open the directory in
 * shared mode and commit TXNS transactions, each of two records (one in
 * t/0, one in t/1, values "c<child>-<i>") and the offset i of group
 * "g<child>" on t/0. The parent then reads both partitions with a handle
 * of its own: every transaction of every child is whole (its record in
 * each partition), each child's in the order it committed them, and each
 * group's offset is the last one committed. A read-only handle's producer
 * with a transactional id gets MQL_READ_ONLY. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define TXNS 50
#define CHILDREN 2

static mql_producer *txn_producer(mql_broker *mq, const char *id) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_transactional_id(pc, id));
    mql_producer *p = NULL;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

/* Child `id`: commits its transactions, then exits 0 (1 through a failed
 * check). */
static void committer(const char *path, int id) {
    mql_broker *mq = open_shared(path);
    char name[16], group[16];
    snprintf(name, sizeof name, "c%d", id);
    snprintf(group, sizeof group, "g%d", id);
    mql_producer *p = txn_producer(mq, name);
    for (int i = 0; i < TXNS; i++) {
        mql_txn *t = NULL;
        CHECK_OK(mql_txn_begin(p, &t));
        char v[32];
        snprintf(v, sizeof v, "c%d-%d", id, i);
        for (int32_t part = 0; part < 2; part++) {
            mql_record r = MQL_RECORD_INIT;
            r.topic = "t";
            r.partition = part;
            r.value = v;
            r.value_len = strlen(v);
            CHECK_OK(mql_txn_send(t, &r));
        }
        mql_committed_offset o = {"t", 0, (uint64_t)i, NULL, 0};
        CHECK_OK(mql_txn_send_offsets_to(t, group, &o, 1));
        CHECK_OK(mql_txn_commit(t, NULL, 0));
        mql_txn_free(t);
    }
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    exit(0);
}

/* Reads t/`part` to its end: each child's values in order, all of them. */
static void check_partition(mql_broker *mq, uint32_t part) {
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "t", part));
    CHECK_OK(mql_seek_to_beginning(c, "t", part));
    uint64_t end = end_of(mq, "t", part);
    int next[CHILDREN] = {0};
    for (;;) {
        uint64_t pos;
        CHECK_OK(mql_position(c, "t", part, &pos));
        if (pos >= end) break;
        mql_message *m = NULL;
        CHECK_OK(mql_poll(c, 5000, &m));
        size_t len = 0;
        const char *v = mql_message_value(m, &len);
        char text[32];
        CHECK(v != NULL && len > 0 && len < sizeof text);
        memcpy(text, v, len);
        text[len] = '\0';
        int id = -1, i = -1;
        CHECK(sscanf(text, "c%d-%d", &id, &i) == 2);
        CHECK(id >= 0 && id < CHILDREN);
        if (i != next[id]) FAIL_AT("t/%u: %s where c%d-%d was due", part, text, id, next[id]);
        next[id]++;
        mql_message_free(m);
    }
    for (int id = 0; id < CHILDREN; id++) CHECK(next[id] == TXNS);
    mql_consumer_free(c);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    char path[4096];
    join_path(path, sizeof path, dir, "txn");
    mql_broker *mq = open_shared(path);
    make_topic(mq, "t", 2);
    /* Closed before the fork: nothing of its engine is copied. */
    CHECK_OK(mql_close(mq));
    pid_t pids[CHILDREN];
    for (int id = 0; id < CHILDREN; id++) {
        fflush(NULL);
        pids[id] = fork();
        CHECK(pids[id] >= 0);
        if (pids[id] == 0) committer(path, id);
    }
    for (int id = 0; id < CHILDREN; id++) {
        int status = 0;
        CHECK(waitpid(pids[id], &status, 0) == pids[id]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            FAIL_AT("committer %d failed (wait status %#x)", id, status);
    }
    mq = open_shared(path);
    check_partition(mq, 0);
    check_partition(mq, 1);
    for (int id = 0; id < CHILDREN; id++) {
        char group[16];
        snprintf(group, sizeof group, "g%d", id);
        mql_consumer *c;
        CHECK_OK(mql_consumer_new(mq, group, NULL, &c));
        uint64_t off = 0;
        CHECK_OK(mql_committed(c, "t", 0, &off, NULL, 0, NULL));
        CHECK(off == TXNS - 1);
        mql_consumer_free(c);
    }
    CHECK_OK(mql_close(mq));

    /* A read-only handle runs no transactions. */
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_shared(cfg, true));
    CHECK_OK(mql_config_set_readonly(cfg, true));
    CHECK_OK(mql_open(path, cfg, &mq));
    mql_config_free(cfg);
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_transactional_id(pc, "ro"));
    mql_producer *p = NULL;
    CHECK_FAIL(mql_producer_new(mq, pc, &p), MQL_READ_ONLY, "");
    CHECK(p == NULL);
    mql_producer_config_free(pc);
    CHECK_OK(mql_close(mq));
    printf("%d committer processes, %d transactions each: all whole, in order\n", CHILDREN, TXNS);
    return 0;
}
