/* How the kernel takes 256 MiB of 256 KiB records, each written with one
 * pwritev after SHIFT bytes of its own (a batch's header and framing), one
 * record after the other, into a file grown first with posix_fallocate (as
 * a segment) or, with a second argument "append", into an empty file.
 * SHIFT 0 writes the records at 256 KiB-aligned offsets, as the sizes
 * bench's write(2) baseline does (appending); any other SHIFT moves every
 * later record off those boundaries.
 *
 * Two more second arguments write zeros over the preallocated file, so
 * that the records overwrite page-cache pages that are already there:
 * "zeroed" writes them all before the clock starts (the most writing
 * zeros ahead could give), "zeroing" from a second thread, 2 MiB at a
 * time and at most 16 MiB ahead of the records, the writer waiting for
 * it when it would pass it (what it gives when it is part of the cost).
 *
 *   cc -O2 -pthread -o /tmp/pwritev_offset bench/pwritev_offset.c
 *   for i in 1 2 3 4 5 6; do for s in 0 96 4096; do /tmp/pwritev_offset $s; done
 *     /tmp/pwritev_offset 0 append; done
 *   for i in 1 2 3 4 5 6; do /tmp/pwritev_offset 0 append; /tmp/pwritev_offset 72
 *     for m in zeroed zeroing; do /tmp/pwritev_offset 72 $m; done; done
 *
 * Prints the records' MB/s (the SHIFT bytes not counted); run interleaved,
 * compare medians. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define ZERO_CHUNK (2 << 20)
#define ZERO_AHEAD (16 << 20)

/* The zeroing thread's file, its length, and how far each side got. */
static int zfd;
static off_t zlen;
static atomic_llong zeroed_to, written_to;

static void *zero_ahead(void *unused) {
    static char zeros[ZERO_CHUNK];
    (void)unused;
    for (off_t at = 0; at < zlen;) {
        if (at >= atomic_load(&written_to) + ZERO_AHEAD) {
            usleep(20);
            continue;
        }
        size_t n = (size_t)(zlen - at < ZERO_CHUNK ? zlen - at : ZERO_CHUNK);
        if (pwrite(zfd, zeros, n, at) != (ssize_t)n) {
            perror("pwrite");
            exit(1);
        }
        at += (off_t)n;
        atomic_store(&zeroed_to, at);
    }
    return NULL;
}

int main(int argc, char **argv) {
    size_t shift = argc > 1 ? strtoul(argv[1], NULL, 10) : 0;
    const char *mode = argc > 2 ? argv[2] : "";
    int append = strcmp(mode, "append") == 0;
    int zeroed = strcmp(mode, "zeroed") == 0, zeroing = strcmp(mode, "zeroing") == 0;
    const size_t rec = 256 << 10, records = 1024;
    char *value = aligned_alloc(4096, rec);
    char *head = malloc(shift + 1);
    if (!value || !head) return 1;
    for (size_t i = 0; i < rec; i++) value[i] = (char)(i * 31 + 7);
    memset(head, 1, shift + 1);
    char path[64];
    snprintf(path, sizeof path, "/tmp/pwritev_offset.%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (!append && posix_fallocate(fd, 0, (off_t)(records * (rec + shift))) != 0)) {
        perror(path);
        return 1;
    }
    zfd = fd;
    zlen = (off_t)(records * (rec + shift));
    if (zeroed) {
        /* The whole file at once: nothing holds the zeroing back. */
        atomic_store(&written_to, zlen);
        zero_ahead(NULL);
        atomic_store(&written_to, 0);
    }
    pthread_t zeroer;
    double t = now();
    if (zeroing && pthread_create(&zeroer, NULL, zero_ahead, NULL) != 0) return 1;
    off_t at = 0;
    for (size_t i = 0; i < records; i++) {
        while (zeroing && atomic_load(&zeroed_to) < at + (off_t)(rec + shift)) {
        }
        struct iovec parts[2] = {{head, shift}, {value, rec}};
        ssize_t n = pwritev(fd, parts, 2, at);
        if (n != (ssize_t)(rec + shift)) {
            perror("pwritev");
            return 1;
        }
        at += n;
        atomic_store(&written_to, at);
    }
    double secs = now() - t;
    if (zeroing) pthread_join(zeroer, NULL);
    printf("shift %zu%s%s: %.0f MB/s\n", shift, *mode ? " " : "", mode,
           (double)(records * rec) / secs / 1e6);
    close(fd);
    unlink(path);
    return 0;
}
