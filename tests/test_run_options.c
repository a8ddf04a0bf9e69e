/* Run options: trusting the block table skips its check and changes nothing else. */
#include "test_util.h"

#include "fai.h"
#include "fai_cases.h"

#include <string.h>

TEST(run_trusted_block_table_is_correct) {
    for (int i = 0; i < 20; i++) {
        fai_case_spec spec;
        fai_case_spec_any(&spec);
        spec.kv_lens = FAI_CASE_LEN_PAGED;
        fai_case c;
        if (fai_case_build(&c, &spec, 4242 + (uint64_t)i) != 0) continue;
        c.problem.trust_block_table = 1;
        fai_case_result r;
        const int ok = fai_case_check(&c, NULL, &r);
        if (!ok) fprintf(stderr, "  FAIL %s\n       %s\n", r.desc, r.why);
        CHECK(ok);
        fai_case_free(&c);
    }
}

/* fai_check_tensors checks the block table even when the plan trusts it, and writes nothing. */
TEST(run_check_tensors_alone) {
    fai_case_spec spec;
    fai_case_spec_any(&spec);
    spec.kv_lens = FAI_CASE_LEN_PAGED;
    spec.batch = 2, spec.seq_kv = 40, spec.page_size = 8;
    static const int32_t lengths[2] = {33, 17};
    spec.lens_kv = lengths;
    fai_case c;
    REQUIRE(fai_case_build(&c, &spec, 99) == 0);
    c.problem.trust_block_table = 1;
    fai_plan *plan;
    REQUIRE(fai_plan_create(&c.problem, &plan) == FAI_OK);
    CHECK(fai_check_tensors(plan, &c.tensors) == FAI_OK);
    const int64_t stride =
        c.tensors.block_table_stride ? c.tensors.block_table_stride : c.problem.pages_per_seq;
    const int32_t saved = c.block_table[stride + 1]; /* sequence 1, page 1: inside its length */
    c.block_table[stride + 1] = (int32_t)c.problem.num_pages;
    CHECK(fai_check_tensors(plan, &c.tensors) == FAI_ERR_INVALID_ARG);
    CHECK(strstr(fai_last_error(), "block_table[1][1]") != NULL);
    c.block_table[stride + 1] = saved;
    CHECK(fai_check_tensors(NULL, &c.tensors) == FAI_ERR_INVALID_ARG);
    CHECK(fai_check_tensors(plan, NULL) == FAI_ERR_INVALID_ARG);
    fai_plan_free(plan);
    fai_case_free(&c);
}
