/* backend_reg.c — the registry of backends: which kinds this build has, the operation table of a kind,
 * and the device queries (as ggml keeps ggml-backend-reg.cpp apart from ggml-backend.cpp).
 *
 * Owns: the kinds ("cpu", "cuda", "auto") and their tables, and finding and loading the CUDA backend
 * module: kernels/ is the shared object tower-cuda.so (kernels/cuda/cuda_backend.h), opened with dlopen the
 * first time something asks for a CUDA device, never before — so `tower serve`, `tower convert` and CPU
 * runs do not map cudart, cuBLAS or NCCL (about 200 MiB resident) — as ggml loads its backends. The
 * module is looked for at $TOWER_CUDA_MODULE (a path; nowhere else when set), next to the running binary,
 * in ../lib/tower/ from it, then by name in the library path. The only engine file that names kernels/.
 * Does not own the backend handle or the checked wrappers (backend.c), which ask tw_backend_find. */
#include "backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_backend.h"
#include "cpu_conv.h"
#include "cuda_backend.h"

enum { WHY_BYTES = 768 };

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const tw_cuda_module *cuda_mod; /* NULL: not found, or refused (cuda_why says why) */
static char cuda_why[WHY_BYTES];

/* The places to look, in order, into paths[3][PATH_MAX]; returns how many. */
static int candidates(char paths[3][PATH_MAX])
{
    const char *env = getenv("TOWER_CUDA_MODULE");
    if (env && *env) {
        snprintf(paths[0], PATH_MAX, "%s", env);
        return 1;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    int k = 0;
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(paths[k++], PATH_MAX, "%.*s/%s", PATH_MAX - 64, exe, TW_CUDA_MODULE_FILE);
            snprintf(paths[k++], PATH_MAX, "%.*s/../lib/tower/%s", PATH_MAX - 64, exe, TW_CUDA_MODULE_FILE);
        }
    }
    snprintf(paths[k++], PATH_MAX, "%s", TW_CUDA_MODULE_FILE); /* the library path */
    return k;
}

/* The module's table, after checking it was built from these sources' types. */
static const tw_cuda_module *module_table(void *h, const char *path)
{
    const tw_cuda_module *m = dlsym(h, TW_CUDA_MODULE_SYMBOL);
    if (!m)
        snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: %.300s lacks %s", path, TW_CUDA_MODULE_SYMBOL);
    else if (m->ops_size != sizeof(tw_backend_ops) || m->error_size != sizeof(tw_error) ||
             m->device_info_size != sizeof(tw_device_info))
        snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: %.300s was built from another version of Tower",
                 path);
    else
        return m;
    return NULL;
}

static void load_cuda(void)
{
    static char paths[3][PATH_MAX];
    int n = candidates(paths);
    const char *env = getenv("TOWER_CUDA_MODULE");
    if (env && *env && access(env, F_OK) != 0) {
        snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: TOWER_CUDA_MODULE names %.300s, which does not exist",
                 env);
        return;
    }
    for (int i = 0; i < n; i++) {
        int by_name = !strchr(paths[i], '/');
        if (!by_name && access(paths[i], F_OK) != 0)
            continue;
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            if (!by_name || !cuda_why[0])
                snprintf(cuda_why, sizeof cuda_why, "no CUDA backend: cannot load %.300s: %.400s", paths[i],
                         dlerror());
            if (by_name)
                continue;
            return; /* a module that is there but does not load (a missing CUDA library): say so */
        }
        cuda_mod = module_table(h, paths[i]);
        if (!cuda_mod)
            dlclose(h);
        return;
    }
    if (!cuda_why[0])
        snprintf(cuda_why, sizeof cuda_why,
                 "no CUDA backend: %s is not next to the tower binary nor in the library path (a build "
                 "without the CUDA toolkit, cuBLAS and NCCL has none)",
                 TW_CUDA_MODULE_FILE);
}

/* The loaded module, or NULL (cuda_why says why). Loads it on the first call; thread-safe. */
static const tw_cuda_module *cuda_module(void)
{
    pthread_once(&cuda_once, load_cuda);
    return cuda_mod;
}

/* Number of CUDA devices: 0 without the module, and (not an error) on a machine without a GPU or
 * driver. */
static int cuda_devices(void)
{
    const tw_cuda_module *m = cuda_module();
    return m ? m->device_count(NULL, 0) : 0;
}

/* "auto" asks for CUDA devices only where the NVIDIA driver is loaded: a CPU machine never maps the
 * module's libraries to learn that it has no GPU. */
static int auto_devices(void)
{
    int driver = access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0;
    return driver ? cuda_devices() : 0;
}

const char *const tw_backend_choices[] = {"auto", "cpu", "cuda", NULL};

const char *tw_backend_resolve(const char *kind)
{
    return kind && strcmp(kind, "auto") == 0 ? (auto_devices() > 0 ? "cuda" : "cpu") : kind;
}

tw_status tw_backend_find(const char *kind, const tw_backend_ops **ops, tw_error *err)
{
    if (!kind)
        return tw_error_set(err, TW_ERR_INVALID, NULL, -1, "tw_backend_create: no backend kind (NULL)");
    int is_auto = strcmp(kind, "auto") == 0, is_cuda = strcmp(kind, "cuda") == 0;
    if (is_cuda || (is_auto && auto_devices() > 0)) {
        const tw_cuda_module *m = cuda_module();
        if (m) {
            *ops = m->ops;
            return TW_OK;
        }
    }
    if (strcmp(kind, "cpu") == 0 || is_auto) {
        *ops = &tw_cpu_backend_ops;
        return TW_OK;
    }
    if (is_cuda)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "tw_backend_create: %s", cuda_why);
    return tw_error_set(err, TW_ERR_INVALID, NULL, -1,
                        "tw_backend_create: unknown backend kind '%s' (expected cpu, cuda or auto)", kind);
}

void tw_backend_process_init(char **argv) { tw_cpu_conv_process_init(argv); }

/* "cuda": whether the module file is there, found without loading it (the server asks this and must
 * not map the CUDA libraries). */
int tw_backend_built(const char *kind)
{
    if (!kind)
        return 0;
    if (strcmp(kind, "cuda") == 0) {
        char paths[3][PATH_MAX];
        int n = candidates(paths);
        for (int i = 0; i < n; i++)
            if (strchr(paths[i], '/') && access(paths[i], F_OK) == 0)
                return 1;
        return 0;
    }
    return strcmp(kind, "cpu") == 0;
}

tw_status tw_backend_device_info(int device, tw_device_info *out, tw_error *err)
{
    memset(out, 0, sizeof *out);
    const tw_cuda_module *m = cuda_module();
    if (!m)
        return tw_error_set(err, TW_ERR_UNSUPPORTED, NULL, -1, "%s", cuda_why);
    return m->device_info(device, out, err);
}

int tw_backend_devices(const char *kind)
{
    if (!kind)
        return 0;
    if (strcmp(kind, "cuda") == 0)
        return cuda_devices();
    if (strcmp(kind, "auto") == 0) {
        int n = auto_devices();
        return n > 0 ? n : 1;
    }
    return strcmp(kind, "cpu") == 0 ? 1 : 0;
}
