/* Subcommands of the `fai` tool. Each returns the process exit status: 0 success, 2 bad input or
 * usage, 1 a failed check. The tool uses only the public API (fai.h). */
#ifndef FAI_CLI_H
#define FAI_CLI_H

int fai_cmd_run(int argc, char **argv);   /* fai run: attention on .npy files */
int fai_cmd_check(int argc, char **argv); /* fai check: randomized sweep against the reference */
int fai_cmd_plan(int argc, char **argv);  /* fai plan: tiles, units, worker split */
int fai_cmd_demo(int argc, char **argv);  /* fai demo: the benchmark shapes once, verified */
int fai_cmd_bench(int argc, char **argv); /* fai bench: medians, rates and the machine's peaks */
int fai_cmd_tune(int argc, char **argv);  /* fai tune: measure the tiles that fit, keep the best */

#endif
