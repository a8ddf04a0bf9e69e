/* fai plan: what fai_plan_create decides for a shape: the tile shape, the units, each worker's
 * contiguous unit range and weight, and the imbalance. */
#include "fai_cli.h"
#include "fai_shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_usage(FILE *out) {
    fprintf(out,
            "usage: fai plan <shape> [--workers N] [--strategy auto|units|greedy] [--tile QxKV]\n"
            "                [--json]\n"
            "Shows the tile shape, the units, each worker's unit range and weight (valid kv\n"
            "tiles) and the imbalance (max / mean worker weight, over every worker asked for).\n"
            "Strategies: auto cuts the line of all valid tiles into equal shares, splitting a\n"
            "unit's kv range across workers where needed (split-KV); units keeps units whole;\n"
            "greedy is the seed's ComputeSplitNBSeq, for comparison.\n\n%s",
            fai_shape_usage);
}

int fai_cmd_plan(int argc, char **argv) {
    fai_shape shape = fai_shape_table[0];
    char *used = calloc((size_t)argc + 1, 1);
    if (!used) return 2;
    int json = 0, status = 2;
    int64_t workers = 0, tile_q = 0, tile_kv = 0;
    fai_split strategy = FAI_SPLIT_AUTO;
    int32_t *seqlens_kv = NULL;
    fai_plan *plan = NULL;
    if (fai_shape_parse(argc, argv, used, &shape, "plan")) goto done;
    for (int i = 1; i < argc; i++) {
        if (used[i]) continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_usage(stdout);
            status = 0;
            goto done;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--workers") && i + 1 < argc &&
                   !fai_parse_int64(argv[i + 1], 1, FAI_MAX_WORKERS, &workers)) {
            i++;
        } else if (!strcmp(argv[i], "--strategy") && i + 1 < argc) {
            const char *name = argv[++i];
            if (!strcmp(name, "auto"))
                strategy = FAI_SPLIT_AUTO;
            else if (!strcmp(name, "units"))
                strategy = FAI_SPLIT_UNITS;
            else if (!strcmp(name, "greedy"))
                strategy = FAI_SPLIT_GREEDY;
            else {
                fprintf(stderr, "fai plan: --strategy needs auto, units or greedy, got '%s'\n",
                        name);
                goto done;
            }
        } else if (!strcmp(argv[i], "--tile") && i + 1 < argc) {
            long long q, kv;
            char tail;
            if (sscanf(argv[++i], "%lldx%lld%c", &q, &kv, &tail) != 2 || q < 1 || kv < 1) {
                fprintf(stderr, "fai plan: --tile needs QxKV (positive integers), got '%s'\n",
                        argv[i]);
                goto done;
            }
            tile_q = q, tile_kv = kv;
        } else {
            fprintf(stderr, "fai plan: unknown or incomplete option '%s' (fai plan --help)\n",
                    argv[i]);
            goto done;
        }
    }
    seqlens_kv = calloc((size_t)shape.b + 1, sizeof *seqlens_kv);
    if (!seqlens_kv) goto done;
    fai_problem pb;
    fai_shape_problem(&shape, &pb, seqlens_kv);
    pb.workers = workers;
    pb.tile_q = tile_q;
    pb.tile_kv = tile_kv;
    pb.split = strategy;
    const fai_status created = fai_plan_create(&pb, &plan);
    if (created != FAI_OK) {
        fprintf(stderr, "fai plan: %s\n", fai_last_error());
        goto done;
    }
    fai_plan_info info;
    fai_plan_get_info(plan, &info);
    if (json) {
        printf("{\"shape\": \"%s\", \"tile_q\": %lld, \"tile_kv\": %lld, \"tile_rows\": %lld, "
               "\"units\": %lld, \"workers\": %lld, \"threads\": %lld, \"total_weight\": %lld, "
               "\"imbalance\": %.6f, \"split_kv\": %s, \"split_units\": %lld, \"partials\": %lld, "
               "\"strategy\": \"%s\", \"workspace_bytes\": %zu, \"isa\": \"%s\", "
               "\"worker_weights\": [",
               shape.name, (long long)info.tile_q, (long long)info.tile_kv,
               (long long)info.tile_rows, (long long)info.units, (long long)info.workers,
               (long long)info.threads, (long long)info.total_weight, info.imbalance,
               info.split_kv ? "true" : "false", (long long)info.split_units,
               (long long)info.partials,
               strategy == FAI_SPLIT_GREEDY  ? "greedy"
               : strategy == FAI_SPLIT_UNITS ? "units"
                                             : "auto",
               info.workspace_bytes, info.isa);
        for (int64_t w = 0; w < info.workers; w++) {
            fai_worker_range range;
            fai_plan_get_worker(plan, w, &range);
            printf("%s%lld", w ? ", " : "", (long long)range.weight);
        }
        printf("], \"worker_units\": [");
        for (int64_t w = 0; w < info.workers; w++) {
            fai_worker_range range;
            fai_plan_get_worker(plan, w, &range);
            printf("%s[%lld, %lld]", w ? ", " : "", (long long)range.unit_begin,
                   (long long)range.unit_end);
        }
        printf("]}\n");
    } else {
        printf("shape %s: B=%lld Hq=%lld Hkv=%lld Sq=%lld Skv=%lld D=%lld Dv=%lld%s%s\n",
               shape.name, (long long)shape.b, (long long)shape.hq, (long long)shape.hkv,
               (long long)shape.sq, (long long)shape.skv, (long long)shape.d,
               (long long)(shape.dv ? shape.dv : shape.d),
               shape.causal == FAI_CAUSAL_BOTTOM_RIGHT ? " causal"
               : shape.causal == FAI_CAUSAL_TOP_LEFT   ? " causal-top-left"
                                                       : "",
               shape.page_size ? " paged" : "");
        printf("tile        %lld x %lld (qSeqBase x kvSeqBase), %lld rows with the GQA group\n",
               (long long)info.tile_q, (long long)info.tile_kv, (long long)info.tile_rows);
        printf("units       %lld (batch, kv-head group, q tile), %lld valid kv tiles in all\n",
               (long long)info.units, (long long)info.total_weight);
        printf("workers     %lld on %lld threads, isa %s, workspace %zu bytes\n",
               (long long)info.workers, (long long)info.threads, info.isa, info.workspace_bytes);
        printf("imbalance   %.4f (max / mean worker weight)\n", info.imbalance);
        printf("split-KV    %s: %lld units in %lld parts\n", info.split_kv ? "yes" : "no",
               (long long)info.split_units, (long long)info.partials);
        printf("%8s %12s %12s %12s %12s %10s\n", "worker", "unit_begin", "unit_end", "tile_begin",
               "tile_end", "weight");
        for (int64_t w = 0; w < info.workers; w++) {
            fai_worker_range range;
            fai_plan_get_worker(plan, w, &range);
            printf("%8lld %12lld %12lld %12lld %12lld %10lld\n", (long long)w,
                   (long long)range.unit_begin, (long long)range.unit_end,
                   (long long)range.line_begin, (long long)range.line_end, (long long)range.weight);
        }
    }
    status = 0;
done:
    fai_plan_free(plan);
    free(seqlens_kv);
    free(used);
    return status;
}
