/* Run options: trusting the block table skips its check and changes nothing else. */
#include "test_util.h"

#include "fai.h"
#include "fai_cases.h"

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
