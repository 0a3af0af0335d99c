/* A share group whose members are in several processes of a shared data
 * directory, through the C API: children made with fork() each open the
 * directory in shared mode and take messages of group "w" with
 * mql_share_poll, write each message's value to their pipe and
 * acknowledge it, until no message came for a while. The parent then
 * checks that every message was acknowledged by exactly one child, each
 * on its first delivery. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define PARTITIONS 2
#define PER_PARTITION 60
#define WORKERS 2

/* Takes and acknowledges messages of group "w" until none came for three
 * polls in a row, writing "<value> <delivery count>\n" to `out` for each.
 * Exits 0, or 1 through a failed check. */
static void worker(const char *path, int out) {
    mql_broker *mq = open_shared(path);
    mql_share_consumer_config cfg = MQL_SHARE_CONSUMER_CONFIG_INIT;
    cfg.max_poll_records = 5;
    mql_share_consumer *sc = NULL;
    CHECK_OK(mql_share_consumer_new(mq, "w", &cfg, &sc));
    CHECK_OK(mql_share_subscribe(sc, "jobs"));
    int idle = 0;
    while (idle < 3) {
        mql_share_message *m = NULL;
        mql_status st = mql_share_poll(sc, 300, &m);
        if (st == MQL_TIMEOUT) {
            idle++;
            continue;
        }
        CHECK_OK(st);
        idle = 0;
        size_t len = 0;
        const char *v = mql_message_value(mql_share_message_message(m), &len);
        char line[64];
        CHECK(v != NULL && len < 32);
        int n = snprintf(line, sizeof line, "%.*s %u\n", (int)len, v,
                         mql_share_message_delivery_count(m));
        CHECK(n > 0 && write(out, line, (size_t)n) == n);
        CHECK_OK(mql_share_ack(sc, m, MQL_ACK_ACCEPT));
        mql_share_message_free(m);
    }
    mql_share_consumer_free(sc);
    CHECK_OK(mql_close(mq));
    close(out);
    exit(0);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    char path[4096];
    join_path(path, sizeof path, dir, "data");
    mql_broker *mq = open_shared(path);
    make_topic(mq, "jobs", PARTITIONS);
    fill(mq, "jobs", PARTITIONS, PER_PARTITION);
    /* Closed before the fork: nothing of the parent's engine is copied
     * into the children. */
    CHECK_OK(mql_close(mq));

    pid_t pids[WORKERS];
    int outs[WORKERS];
    for (int w = 0; w < WORKERS; w++) {
        int fds[2];
        CHECK(pipe(fds) == 0);
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            for (int j = 0; j < w; j++) close(outs[j]);
            close(fds[0]);
            worker(path, fds[1]);
        }
        close(fds[1]);
        pids[w] = pid;
        outs[w] = fds[0];
    }
    /* Every value once, each on its first delivery. */
    int seen[PARTITIONS][PER_PARTITION] = {{0}};
    int total = 0, per_worker[WORKERS] = {0};
    for (int w = 0; w < WORKERS; w++) {
        FILE *f = fdopen(outs[w], "r");
        CHECK(f != NULL);
        unsigned part = 0, count = 0;
        int i = 0;
        while (fscanf(f, "%u:%d %u", &part, &i, &count) == 3) {
            CHECK(part < PARTITIONS && i >= 0 && i < PER_PARTITION);
            if (seen[part][i]++) FAIL_AT("%u:%d acknowledged twice", part, i);
            CHECK(count == 1);
            total++;
            per_worker[w]++;
        }
        fclose(f);
    }
    for (int w = 0; w < WORKERS; w++) {
        int status = 0;
        CHECK(waitpid(pids[w], &status, 0) == pids[w]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            FAIL_AT("worker %d failed (wait status %#x)", w, status);
    }
    CHECK(total == PARTITIONS * PER_PARTITION);
    printf("%d messages over %d worker processes (%d, %d), each acknowledged once\n", total,
           WORKERS, per_worker[0], per_worker[1]);

    /* The group's state, read here: nothing left. */
    mq = open_shared(path);
    mql_share_consumer *sc = NULL;
    CHECK_OK(mql_share_consumer_new(mq, "w", NULL, &sc));
    CHECK_OK(mql_share_subscribe(sc, "jobs"));
    mql_share_message *m = NULL;
    CHECK_STATUS(mql_share_poll(sc, 200, &m), MQL_TIMEOUT);
    mql_share_consumer_free(sc);
    CHECK_OK(mql_close(mq));
    return 0;
}
