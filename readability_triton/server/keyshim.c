/* readability-triton: hand tritonserver arguments that never appear on its command line.
 *
 * Loaded with LD_PRELOAD, this wraps glibc's __libc_start_main. When the environment
 * variable READABILITY_TRITON_ARGS_FD names an open file descriptor, it reads NUL-separated
 * arguments from it until end of file, closes it, and calls the program's main with its
 * own arguments followed by those. The process's original argument area (what
 * /proc/PID/cmdline and `ps` show to every local user) never holds them. It then removes
 * READABILITY_TRITON_ARGS_FD and LD_PRELOAD from the environment, so that the processes the
 * program starts (the python-backend stubs) run without it. Without the variable it does
 * nothing. Any failure exits with status 97 and a message on stderr: a server must not
 * start without the arguments it was meant to get.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ENV_FD "READABILITY_TRITON_ARGS_FD"
#define MAX_BYTES (1 << 20)

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void), void *);

static main_fn real_main;
static int new_argc;
static char **new_argv;

static void fail(const char *what) {
    fprintf(stderr, "readability-triton keyshim: %s: %s\n", what, strerror(errno));
    _exit(97);
}

static int wrapped_main(int argc, char **argv, char **envp) {
    (void)argc;
    (void)argv;
    return real_main(new_argc, new_argv, envp);
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end) {
    start_fn real_start = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
    const char *fd_text = getenv(ENV_FD);
    if (real_start == NULL) {
        fprintf(stderr, "readability-triton keyshim: no __libc_start_main to wrap\n");
        _exit(97);
    }
    if (fd_text != NULL) {
        char *end = NULL;
        long fd = strtol(fd_text, &end, 10);
        char *buffer = malloc(MAX_BYTES);
        size_t used = 0;
        int extra = 0;
        if (end == fd_text || *end != '\0' || fd < 0) {
            errno = EINVAL;
            fail(ENV_FD);
        }
        if (buffer == NULL)
            fail("malloc");
        for (;;) {
            ssize_t got = read((int)fd, buffer + used, MAX_BYTES - used);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                fail("read");
            if (got == 0)
                break;
            used += (size_t)got;
            if (used == MAX_BYTES) {
                errno = E2BIG;
                fail("read");
            }
        }
        close((int)fd);
        for (size_t i = 0; i < used; i++)
            if (buffer[i] == '\0')
                extra++;
        new_argv = calloc((size_t)argc + (size_t)extra + 1, sizeof(char *));
        if (new_argv == NULL)
            fail("calloc");
        for (int i = 0; i < argc; i++)
            new_argv[i] = argv[i];
        new_argc = argc;
        for (size_t i = 0; i < used;) {
            new_argv[new_argc++] = buffer + i;
            i += strlen(buffer + i) + 1;
        }
        new_argv[new_argc] = NULL;
        unsetenv(ENV_FD);
        unsetenv("LD_PRELOAD");
        real_main = main;
        main = wrapped_main;
    }
    return real_start(main, argc, argv, init, fini, rtld_fini, stack_end);
}
