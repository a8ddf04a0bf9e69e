/* Subcommands of the `fai` tool. Each returns the process exit status: 0 success, 2 bad input or
 * usage, 1 a failed check. The tool uses only the public API (fai.h). */
#ifndef FAI_CMD_H
#define FAI_CMD_H

int ft_cmd_run(int argc, char **argv);   /* fai run: attention on .npy files */
int ft_cmd_check(int argc, char **argv); /* fai check: randomized sweep against the reference */
int ft_cmd_plan(int argc, char **argv);  /* fai plan: tiles, units, worker split */
int ft_cmd_demo(int argc, char **argv);  /* fai demo: the benchmark shapes once, verified */
int ft_cmd_bench(int argc, char **argv); /* fai bench: medians, rates and the machine's peaks */
int ft_cmd_tune(int argc, char **argv);  /* fai tune: measure the tiles that fit, keep the best */

#endif
