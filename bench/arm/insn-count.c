/*
 * A qemu-user TCG plugin that counts the guest instructions a program executes, in total and
 * per translation block (start address, instruction count, executions), for attributing the
 * count to the program's functions. Built against qemu's own include/qemu/qemu-plugin.h of the
 * qemu that loads it (bench/arm-insn.sh).
 *
 *   qemu-aarch64 -plugin ./libinsncount.so,out=FILE prog...
 *
 * FILE receives "total N" and then one "vaddr n_insns executions flops" line per translated
 * block that ran, flops being the single/double-precision arithmetic of one execution of the
 * block as its disassembly reads (fmla/fmls/fmadd-type 2 per lane; fadd, fsub, fmul, fdiv,
 * fsqrt, fabd, faddp 1 per lane; max/min, compares and conversions 0).
 * The counters are inline adds: plain, not atomic, so the counts are exact for one running
 * guest thread at a time (edgebench profile --threads 1).
 *
 * With mark=NR (or mark=NR:ARG) every entry into guest system call NR (whose first argument is
 * ARG) also writes FILE.markK, K = 1, 2, ...: the same format, the counts up to that moment.
 * A program's own calls between its steps (edgebench profile's getrusage, 165 on aarch64; a
 * Python loop's flushed write to stdout, 64:1) then give one step as the difference of two
 * marks of a single run.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

struct block {
    uint64_t vaddr;
    uint64_t n_insns;
    uint64_t executions;
    uint64_t flops;
    struct block *next;
};

static struct block *blocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *out_path;
static int64_t mark_syscall = -1;
static int mark_has_arg;
static uint64_t mark_arg;
static unsigned marks;

/* Lanes of the destination operand: v0.4s -> 4, v0.2d -> 2, s0/d0/h0 -> 1, anything else 0. */
static int lanes(const char *op)
{
    if (op[0] == 'v') {
        const char *dot = strchr(op, '.');
        return dot ? atoi(dot + 1) : 0;
    }
    if ((op[0] == 's' || op[0] == 'd' || op[0] == 'h') && op[1] >= '0' && op[1] <= '9') {
        return 1;
    }
    return 0;
}

static uint64_t insn_flops(const char *disas)
{
    static const char *const fused[] = {"fmla", "fmls", "fmadd", "fmsub", "fnmadd", "fnmsub"};
    static const char *const single[] = {"fadd", "fsub", "fmul", "fmulx", "fnmul", "fdiv",
                                         "fsqrt", "fabd", "faddp"};
    char mnem[16];
    size_t n = strcspn(disas, " \t");
    if (disas[0] != 'f' || n >= sizeof(mnem)) {
        return 0;
    }
    memcpy(mnem, disas, n);
    mnem[n] = 0;
    const char *op = disas + n + strspn(disas + n, " \t");
    for (size_t i = 0; i < sizeof(fused) / sizeof(fused[0]); i++) {
        if (strcmp(mnem, fused[i]) == 0) {
            return 2 * lanes(op);
        }
    }
    for (size_t i = 0; i < sizeof(single) / sizeof(single[0]); i++) {
        if (strcmp(mnem, single[i]) == 0) {
            return lanes(op);
        }
    }
    return 0;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    struct block *b = calloc(1, sizeof(*b));
    if (!b) {
        abort();
    }
    b->vaddr = qemu_plugin_tb_vaddr(tb);
    b->n_insns = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < b->n_insns; i++) {
        char *d = qemu_plugin_insn_disas(qemu_plugin_tb_get_insn(tb, i));
        b->flops += insn_flops(d);
        free(d);
    }
    /* One add per execution of the block; its instructions are multiplied in at exit. */
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->executions, 1);
    pthread_mutex_lock(&lock);
    b->next = blocks;
    blocks = b;
    pthread_mutex_unlock(&lock);
}

static void write_counts(const char *path)
{
    uint64_t total = 0;
    pthread_mutex_lock(&lock);
    for (struct block *b = blocks; b; b = b->next) {
        total += b->n_insns * b->executions;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        pthread_mutex_unlock(&lock);
        char msg[512];
        snprintf(msg, sizeof(msg), "insn-count: cannot write %s\n", path);
        qemu_plugin_outs(msg);
        return;
    }
    fprintf(f, "total %" PRIu64 "\n", total);
    for (struct block *b = blocks; b; b = b->next) {
        if (b->executions) {
            fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", b->vaddr,
                    b->n_insns, b->executions, b->flops);
        }
    }
    fclose(f);
    pthread_mutex_unlock(&lock);
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    write_counts(out_path);
}

static void at_syscall(qemu_plugin_id_t id, unsigned int vcpu_index, int64_t num, uint64_t a1,
                       uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8)
{
    if (num != mark_syscall || (mark_has_arg && a1 != mark_arg)) {
        return;
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s.mark%u", out_path, ++marks);
    write_counts(path);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                           int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "out=", 4) == 0) {
            out_path = strdup(argv[i] + 4);
        } else if (strncmp(argv[i], "mark=", 5) == 0) {
            char *end;
            mark_syscall = strtoll(argv[i] + 5, &end, 10);
            if (*end == ':') {
                mark_has_arg = 1;
                mark_arg = strtoull(end + 1, NULL, 10);
            }
        }
    }
    if (!out_path) {
        qemu_plugin_outs("insn-count: give out=FILE\n");
        return -1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    if (mark_syscall >= 0) {
        qemu_plugin_register_vcpu_syscall_cb(id, at_syscall);
    }
    return 0;
}
