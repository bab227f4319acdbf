/* A tiny NVTX program recorded into sample_db/nvtx_domains.sqlite (scripts/record/samples.sh):
 * the shapes cuBLAS and NCCL produce beside PyTorch's own ranges, through the NVTX C API.
 *   - the default domain: push/pop ranges with inline text (what emit_nvtx writes);
 *   - a "cuBLAS" domain (nvtxDomainCreateA) whose ranges and marks carry registered strings
 *     (nvtxDomainRegisterStringA), as cuBLAS 12 writes them;
 *   - a "NCCL" domain with inline-text push/pop ranges and a start/end range;
 *   - a registered string in the default domain (a NULL domain handle).
 * Build: cc -O1 -I<nvtx3 include dir>/.. nvtx_domains.c -o nvtx_domains -ldl
 */
#include <nvtx3/nvToolsExt.h>
#include <time.h>

static void spin(long ns) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}

static nvtxEventAttributes_t registered(nvtxStringHandle_t s) {
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = s;
    return a;
}

static nvtxEventAttributes_t ascii(const char *text) {
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = text;
    return a;
}

int main(void) {
    nvtxDomainHandle_t cublas = nvtxDomainCreateA("cuBLAS");
    nvtxDomainHandle_t nccl = nvtxDomainCreateA("NCCL");
    nvtxStringHandle_t gemm = nvtxDomainRegisterStringA(cublas, "cublasSgemm_v2");
    nvtxStringHandle_t axpy = nvtxDomainRegisterStringA(cublas, "cublasSaxpy_v2");
    nvtxStringHandle_t setup = nvtxDomainRegisterStringA(NULL, "setup (registered, default domain)");
    nvtxEventAttributes_t a;

    a = registered(setup);
    nvtxDomainRangePushEx(NULL, &a);
    spin(100000);
    nvtxDomainRangePop(NULL);
    for (int step = 0; step < 3; ++step) {
        char name[32] = "ProfilerStep#0";
        name[13] = (char)('0' + step);
        nvtxRangePushA(name);
        nvtxRangePushA("aten::mm");
        a = registered(gemm);
        nvtxDomainRangePushEx(cublas, &a);
        spin(200000);
        nvtxDomainRangePop(cublas);
        nvtxRangePop();
        nvtxRangePushA("aten::add_");
        a = registered(axpy);
        nvtxDomainRangePushEx(cublas, &a);
        nvtxDomainMarkEx(cublas, &a);
        spin(100000);
        nvtxDomainRangePop(cublas);
        nvtxRangePop();
        a = ascii("ncclAllReduce");
        nvtxDomainRangePushEx(nccl, &a);
        a = ascii("ncclKernel window");
        nvtxRangeId_t id = nvtxDomainRangeStartEx(nccl, &a);
        spin(150000);
        nvtxDomainRangeEnd(nccl, id);
        nvtxDomainRangePop(nccl);
        nvtxRangePop();
    }
    return 0;
}
