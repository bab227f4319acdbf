/* Minimal NVTX collector for tests: logs every range/mark call to $NVBRIDGE_NVTX_LOG.
 *
 * NVTX loads the library named by NVTX_INJECTION64_PATH on the first NVTX call in a process and
 * calls InitializeInjectionNvtx2(getExportTable). We ask the callbacks export table (id 1) for the
 * function tables of module 1 (core: nvtxRangePushA & co.) and module 5 (core2: per-domain calls)
 * and write our own functions into their slots. Every NVTX copy in the process (the nvtx package,
 * libnvtx3interop, libtorch_cuda) calls the initializer, so it must fill tables every time but
 * open the log only once. Line format: monotonic_ns TAB tid TAB event TAB domain TAB message.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef void (*fnptr)(void);
typedef int (*get_module_table_t)(int module, fnptr*** table, unsigned int* size);
typedef struct { size_t struct_size; get_module_table_t GetModuleFunctionTable; } callbacks_t;
typedef const void* (*get_export_table_t)(uint32_t id);
typedef struct { uint16_t version, size; uint32_t category; int32_t color_type; uint32_t color;
                 int32_t payload_type, reserved; uint64_t payload; int32_t message_type;
                 const void* message; } attrs_t; /* nvtxEventAttributes_t v2, 48 bytes */

static FILE* out;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void emit(const char* ev, const void* domain, const char* msg) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    pthread_mutex_lock(&lock);
    if (out) fprintf(out, "%lld\t%ld\t%s\t%s\t%s\n", ns, (long)syscall(SYS_gettid), ev,
                     domain ? (const char*)domain : "", msg ? msg : "");
    pthread_mutex_unlock(&lock);
}
static const char* attr_msg(const attrs_t* a) {
    if (!a) return "";
    if (a->message_type == 1 || a->message_type == 3) return (const char*)a->message; /* ASCII or our registered handle */
    return "<unsupported message type>";
}
/* core module (1) */
static void markA(const char* m) { emit("mark", 0, m); }
static void markEx(const attrs_t* a) { emit("mark", 0, attr_msg(a)); }
static int pushA(const char* m) { emit("push", 0, m); return 0; }
static int pushEx(const attrs_t* a) { emit("push", 0, attr_msg(a)); return 0; }
static int pop(void) { emit("pop", 0, ""); return 0; }
static uint64_t startA(const char* m) { emit("start", 0, m); return 1; }
static uint64_t startEx(const attrs_t* a) { emit("start", 0, attr_msg(a)); return 1; }
static void end(uint64_t id) { (void)id; emit("end", 0, ""); }
/* core2 module (5): handles are strdup'ed names, so a registered string is its own text */
static void d_markEx(const void* d, const attrs_t* a) { emit("mark", d, attr_msg(a)); }
static uint64_t d_startEx(const void* d, const attrs_t* a) { emit("start", d, attr_msg(a)); return 1; }
static void d_end(const void* d, uint64_t id) { (void)id; emit("end", d, ""); }
static int d_pushEx(const void* d, const attrs_t* a) { emit("push", d, attr_msg(a)); return 0; }
static int d_pop(const void* d) { emit("pop", d, ""); return 0; }
static const void* d_register(const void* d, const char* s) { (void)d; return strdup(s); }
static const void* d_create(const char* name) { return strdup(name); }
static void d_destroy(const void* d) { (void)d; }

static void fill(get_module_table_t get, int module, const int* slots, fnptr const* fns, int n) {
    fnptr** table = 0; unsigned int size = 0;
    if (!get(module, &table, &size) || !table) return;
    for (int i = 0; i < n; i++)
        if ((unsigned)slots[i] < size && table[slots[i]]) *table[slots[i]] = fns[i];
}

int InitializeInjectionNvtx2(get_export_table_t get_export_table) {
    pthread_mutex_lock(&lock);
    if (!out) {
        const char* path = getenv("NVBRIDGE_NVTX_LOG");
        out = fopen(path ? path : "nvtx_log.tsv", "a");
        if (out) setvbuf(out, 0, _IOFBF, 1 << 20);
    }
    pthread_mutex_unlock(&lock);
    const callbacks_t* cb = (const callbacks_t*)get_export_table(1);
    if (!cb || !cb->GetModuleFunctionTable) return 0;
    static const int core_slots[] = {1, 2, 4, 5, 7, 8, 9, 11};
    static fnptr const core_fns[] = {(fnptr)markEx, (fnptr)markA, (fnptr)startEx, (fnptr)startA,
                                     (fnptr)end, (fnptr)pushEx, (fnptr)pushA, (fnptr)pop};
    static const int core2_slots[] = {1, 2, 3, 4, 5, 10, 12, 14};
    static fnptr const core2_fns[] = {(fnptr)d_markEx, (fnptr)d_startEx, (fnptr)d_end,
                                      (fnptr)d_pushEx, (fnptr)d_pop, (fnptr)d_register,
                                      (fnptr)d_create, (fnptr)d_destroy};
    fill(cb->GetModuleFunctionTable, 1, core_slots, core_fns, 8);
    fill(cb->GetModuleFunctionTable, 5, core2_slots, core2_fns, 8);
    return 1;
}
