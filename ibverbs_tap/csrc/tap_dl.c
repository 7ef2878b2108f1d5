/* dlsym/dlvsym interposition, so that programs that dlopen libibverbs get our verbs wrappers.
 *
 * Our own dlsym shadows libc's for every caller, including this library, so the real ones are
 * looked up directly in the symbol table of the loaded libc (or libdl on glibc < 2.34). The
 * pass-through path must be a tail call: glibc resolves RTLD_NEXT relative to the return
 * address, which then still points into the caller (the library is built with -O2, and the
 * tests check RTLD_NEXT from a traced program).
 */
#define _GNU_SOURCE
#include "tap.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <string.h>

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);

static dlsym_fn real_dlsym;
static dlvsym_fn real_dlvsym;

struct lookup {
    const char *name;
    void *found;
};

static uint32_t gnu_hash(const char *s)
{
    uint32_t h = 5381;
    for (; *s; s++)
        h = (h << 5) + h + (unsigned char)*s;
    return h;
}

static uintptr_t dyn_ptr(ElfW(Addr) base, ElfW(Addr) value)
{
    return value < base ? base + value : value; /* glibc relocates most d_ptr in place */
}

/* Finds a defined symbol through DT_GNU_HASH, preferring its default (non-hidden) version. */
static void *elf_lookup(const struct dl_phdr_info *info, const char *name)
{
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gnuhash = NULL;
    const ElfW(Half) *versym = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC)
            continue;
        const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        for (; d->d_tag != DT_NULL; d++) {
            uintptr_t p = dyn_ptr(info->dlpi_addr, d->d_un.d_ptr);
            switch (d->d_tag) {
            case DT_SYMTAB: symtab = (const ElfW(Sym) *)p; break;
            case DT_STRTAB: strtab = (const char *)p; break;
            case DT_GNU_HASH: gnuhash = (const uint32_t *)p; break;
            case DT_VERSYM: versym = (const ElfW(Half) *)p; break;
            default: break;
            }
        }
    }
    if (!symtab || !strtab || !gnuhash)
        return NULL;
    uint32_t nbuckets = gnuhash[0], symoffset = gnuhash[1], bloom_size = gnuhash[2];
    const ElfW(Addr) *bloom = (const ElfW(Addr) *)&gnuhash[4];
    const uint32_t *buckets = (const uint32_t *)&bloom[bloom_size];
    const uint32_t *chain = &buckets[nbuckets];
    uint32_t h = gnu_hash(name);
    uint32_t ix = buckets[h % nbuckets];
    void *fallback = NULL;
    if (ix < symoffset)
        return NULL;
    for (;; ix++) {
        uint32_t h2 = chain[ix - symoffset];
        const ElfW(Sym) *s = &symtab[ix];
        if ((h | 1) == (h2 | 1) && s->st_shndx != SHN_UNDEF && strcmp(strtab + s->st_name, name) == 0) {
            void *addr = (void *)(info->dlpi_addr + s->st_value);
            if (!versym || !(versym[ix] & 0x8000))
                return addr;
            fallback = addr;
        }
        if (h2 & 1)
            break;
    }
    return fallback;
}

static int find_in_libc(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct lookup *l = data;
    const char *base = strrchr(info->dlpi_name, '/');
    base = base ? base + 1 : info->dlpi_name;
    if (strncmp(base, "libc.so", 7) != 0 && strncmp(base, "libdl.so", 8) != 0)
        return 0;
    l->found = elf_lookup(info, l->name);
    return l->found != NULL;
}

static void resolve_dl(void)
{
    struct lookup l = {"dlsym", NULL};
    dl_iterate_phdr(find_in_libc, &l);
    real_dlsym = (dlsym_fn)l.found;
    l.name = "dlvsym";
    l.found = NULL;
    dl_iterate_phdr(find_in_libc, &l);
    real_dlvsym = (dlvsym_fn)l.found;
}

void *tap_real_dlsym(void *handle, const char *name)
{
    if (TAP_UNLIKELY(!real_dlsym))
        resolve_dl();
    return real_dlsym ? real_dlsym(handle, name) : NULL;
}

void *tap_real_dlvsym(void *handle, const char *name, const char *version)
{
    if (TAP_UNLIKELY(!real_dlvsym))
        resolve_dl();
    return real_dlvsym ? real_dlvsym(handle, name, version) : NULL;
}

/* Called from this library, so RTLD_NEXT means "after ibverbs-tap". */
void *tap_next(const char *name)
{
    return tap_real_dlsym(RTLD_NEXT, name);
}

static inline int is_verbs_name(const char *name)
{
    return name && name[0] == 'i' && strncmp(name, "ibv_", 4) == 0;
}

TAP_EXPORT void *dlsym(void *handle, const char *name)
{
    if (TAP_UNLIKELY(!real_dlsym))
        resolve_dl();
    if (TAP_UNLIKELY(is_verbs_name(name)))
        return real_dlsym ? tap_verbs_hook(name, real_dlsym(handle, name)) : NULL;
    if (TAP_UNLIKELY(!real_dlsym))
        return NULL;
    return real_dlsym(handle, name); /* tail call: keeps the caller's return address */
}

TAP_EXPORT void *dlvsym(void *handle, const char *name, const char *version)
{
    if (TAP_UNLIKELY(!real_dlvsym))
        resolve_dl();
    if (TAP_UNLIKELY(is_verbs_name(name)))
        return real_dlvsym ? tap_verbs_hook(name, real_dlvsym(handle, name, version)) : NULL;
    if (TAP_UNLIKELY(!real_dlvsym))
        return NULL;
    return real_dlvsym(handle, name, version);
}
