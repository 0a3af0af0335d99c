/* How the kernel takes 256 MiB of 256 KiB records, each written with one
 * pwritev after SHIFT bytes of its own (a batch's header and framing), one
 * record after the other, into a file grown first with posix_fallocate (as
 * a segment) or, with a second argument "append", into an empty file.
 * SHIFT 0 writes the records at 256 KiB-aligned offsets, as the sizes
 * bench's write(2) baseline does (appending); any other SHIFT moves every
 * later record off those boundaries.
 *
 *   cc -O2 -o /tmp/pwritev_offset bench/pwritev_offset.c
 *   for i in 1 2 3 4 5 6; do for s in 0 96 4096; do /tmp/pwritev_offset $s; done
 *     /tmp/pwritev_offset 0 append; done
 *
 * Prints the records' MB/s (the SHIFT bytes not counted); run interleaved,
 * compare medians. */
#define _GNU_SOURCE
#include <fcntl.h>
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

int main(int argc, char **argv) {
    size_t shift = argc > 1 ? strtoul(argv[1], NULL, 10) : 0;
    int append = argc > 2 && strcmp(argv[2], "append") == 0;
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
    double t = now();
    off_t at = 0;
    for (size_t i = 0; i < records; i++) {
        struct iovec parts[2] = {{head, shift}, {value, rec}};
        ssize_t n = pwritev(fd, parts, 2, at);
        if (n != (ssize_t)(rec + shift)) {
            perror("pwritev");
            return 1;
        }
        at += n;
    }
    double secs = now() - t;
    printf("shift %zu%s: %.0f MB/s\n", shift, append ? " append" : "", (double)(records * rec) / secs / 1e6);
    close(fd);
    unlink(path);
    return 0;
}
