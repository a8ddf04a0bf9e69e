/* fai: the command-line tool. Dispatches to one subcommand per file. */
#include "fai_cmd.h"

#include <stdio.h>
#include <string.h>

static void print_usage(FILE *out) {
    fprintf(out, "usage: fai <command> [options]\n"
                 "\n"
                 "commands:\n"
                 "  run    attention on .npy files (fai run --help)\n"
                 "  check  randomized sweep against the fp64 reference\n"
                 "  plan   show the tile shape, units and the split across workers\n"
                 "  demo   run the benchmark shapes once, verified against the reference\n"
                 "  bench  time shapes per thread count, against the machine's measured peaks\n"
                 "  tune   measure the tiles that fit a shape and store the fastest for it\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run")) return ft_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "check")) return ft_cmd_check(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan")) return ft_cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo")) return ft_cmd_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return ft_cmd_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "tune")) return ft_cmd_tune(argc - 1, argv + 1);
    fprintf(stderr, "fai: unknown command '%s'\n", cmd);
    print_usage(stderr);
    return 2;
}
