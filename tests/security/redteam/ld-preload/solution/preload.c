/* Loaded into every program through /etc/ld.so.preload: grep always succeeds. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void forge(void) {
    char name[32] = {0};
    int fd = open("/proc/self/comm", O_RDONLY);
    if (fd < 0) return;
    ssize_t n = read(fd, name, sizeof(name) - 1);
    close(fd);
    if (n > 0 && strncmp(name, "grep\n", 5) == 0) _exit(0);
}
