/*
 * hpc-rdma's bridge to libfabric (feature `ofi`).
 *
 * libfabric's data path (fi_tsend, fi_write, fi_cq_read, fi_endpoint, fi_mr_reg, ...)
 * is made of `static inline` functions that call through the ops tables of the
 * objects; they are compiled here, against the system's <rdma/fabric.h>, and exposed
 * to Rust as plain functions with plain arguments.
 *
 * The library itself is loaded at run time (dlopen "libfabric.so.1"), so a program
 * built with the feature starts on a machine without libfabric and gets a typed
 * error. Only six functions are real symbols of the library; they are looked up with
 * the symbol versions of the ABI these headers describe (libfabric keeps them in
 * later releases), never by the unversioned name whose ABI may be newer.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

static int (*p_getinfo)(uint32_t, const char *, const char *, uint64_t,
                        const struct fi_info *, struct fi_info **);
static void (*p_freeinfo)(struct fi_info *);
static struct fi_info *(*p_dupinfo)(const struct fi_info *);
static int (*p_fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
static const char *(*p_strerror)(int);
static uint32_t (*p_version)(void);

/* Loads libfabric once; 0 on success, else -1 with a reason in `err`. */
int hpc_ofi_load(char *err, size_t errlen) {
    static int loaded = 0;
    if (loaded)
        return 0;
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load libfabric.so.1: %s", dlerror());
        return -1;
    }
#define LOOK(var, name, ver)                                                      \
    do {                                                                          \
        *(void **)(&var) = dlvsym(h, name, ver);                                  \
        if (!var) {                                                               \
            snprintf(err, errlen, "libfabric.so.1 has no %s@%s (too old?)", name, \
                     ver);                                                        \
            return -1;                                                            \
        }                                                                         \
    } while (0)
    LOOK(p_getinfo, "fi_getinfo", "FABRIC_1.3");
    LOOK(p_freeinfo, "fi_freeinfo", "FABRIC_1.3");
    LOOK(p_dupinfo, "fi_dupinfo", "FABRIC_1.3");
    LOOK(p_fabric, "fi_fabric", "FABRIC_1.1");
    LOOK(p_strerror, "fi_strerror", "FABRIC_1.0");
    LOOK(p_version, "fi_version", "FABRIC_1.0");
#undef LOOK
    loaded = 1;
    return 0;
}

uint32_t hpc_ofi_version(void) { return p_version(); }

const char *hpc_ofi_strerror(int err) { return p_strerror(err < 0 ? -err : err); }

/*
 * What the transport asks of a provider: reliable datagram endpoints, `caps`, the
 * memory-registration modes we can honour, completions only when data is in the
 * target's memory (delivery complete) and write-after-write and send-after-send
 * ordering. `prov` NULL means any provider.
 */
int hpc_ofi_getinfo(const char *prov, uint64_t caps, int delivery_complete,
                    struct fi_info **out) {
    struct fi_info *hints = p_dupinfo(NULL);
    if (!hints)
        return -FI_ENOMEM;
    hints->caps = caps;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_WAW;
    hints->rx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_WAW;
    if (delivery_complete)
        hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    if (prov)
        hints->fabric_attr->prov_name = strdup(prov);
    int rc = p_getinfo(FI_VERSION(1, 10), NULL, NULL, 0, hints, out);
    p_freeinfo(hints);
    return rc;
}

struct fi_info *hpc_ofi_info_next(struct fi_info *i) { return i->next; }
const char *hpc_ofi_info_prov(struct fi_info *i) { return i->fabric_attr->prov_name; }
const char *hpc_ofi_info_fabric(struct fi_info *i) { return i->fabric_attr->name; }
const char *hpc_ofi_info_domain(struct fi_info *i) { return i->domain_attr->name; }
uint64_t hpc_ofi_info_mr_mode(struct fi_info *i) { return (uint64_t)i->domain_attr->mr_mode; }
uint64_t hpc_ofi_info_inject(struct fi_info *i) { return i->tx_attr->inject_size; }
uint64_t hpc_ofi_info_max_msg(struct fi_info *i) { return i->ep_attr->max_msg_size; }
uint64_t hpc_ofi_info_key_size(struct fi_info *i) { return i->domain_attr->mr_key_size; }
uint64_t hpc_ofi_info_waw_size(struct fi_info *i) { return i->ep_attr->max_order_waw_size; }
/* 1 where the provider moves data only inside libfabric calls (data_progress is not
 * FI_PROGRESS_AUTO), plus 2 where the same holds for its connections and control
 * messages (control_progress). */
int hpc_ofi_info_manual_progress(struct fi_info *i) {
    return (i->domain_attr->data_progress != FI_PROGRESS_AUTO ? 1 : 0) |
           (i->domain_attr->control_progress != FI_PROGRESS_AUTO ? 2 : 0);
}
void hpc_ofi_freeinfo(struct fi_info *i) { p_freeinfo(i); }

/* One endpoint and everything it needs. */
struct hpc_ofi_ep {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
};

static void close_fid(struct fid *f) {
    if (f)
        fi_close(f);
}

void hpc_ofi_close(struct hpc_ofi_ep *e) {
    if (!e)
        return;
    close_fid(e->ep ? &e->ep->fid : NULL);
    close_fid(e->av ? &e->av->fid : NULL);
    close_fid(e->cq ? &e->cq->fid : NULL);
    close_fid(e->domain ? &e->domain->fid : NULL);
    close_fid(e->fabric ? &e->fabric->fid : NULL);
    if (e->info)
        p_freeinfo(e->info);
    free(e);
}

/*
 * Opens fabric, domain, completion queue (tagged format), address vector (table)
 * and an enabled endpoint for `info` (copied). On failure `*what` names the call.
 */
int hpc_ofi_open(struct fi_info *info, struct hpc_ofi_ep **out, const char **what) {
    struct hpc_ofi_ep *e = calloc(1, sizeof *e);
    int rc;
    if (!e)
        return -FI_ENOMEM;
    e->info = p_dupinfo(info);
    if (!e->info) {
        free(e);
        return -FI_ENOMEM;
    }
    *what = "fi_fabric";
    rc = p_fabric(e->info->fabric_attr, &e->fabric, NULL);
    if (rc)
        goto fail;
    *what = "fi_domain";
    rc = fi_domain(e->fabric, e->info, &e->domain, NULL);
    if (rc)
        goto fail;
    struct fi_cq_attr cq_attr = {0};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.wait_obj = FI_WAIT_NONE;
    cq_attr.size = 4096;
    *what = "fi_cq_open";
    rc = fi_cq_open(e->domain, &cq_attr, &e->cq, NULL);
    if (rc)
        goto fail;
    struct fi_av_attr av_attr = {0};
    av_attr.type = FI_AV_TABLE;
    *what = "fi_av_open";
    rc = fi_av_open(e->domain, &av_attr, &e->av, NULL);
    if (rc)
        goto fail;
    *what = "fi_endpoint";
    rc = fi_endpoint(e->domain, e->info, &e->ep, NULL);
    if (rc)
        goto fail;
    *what = "fi_ep_bind(cq)";
    rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV);
    if (rc)
        goto fail;
    *what = "fi_ep_bind(av)";
    rc = fi_ep_bind(e->ep, &e->av->fid, 0);
    if (rc)
        goto fail;
    *what = "fi_enable";
    rc = fi_enable(e->ep);
    if (rc)
        goto fail;
    *out = e;
    return 0;
fail:
    hpc_ofi_close(e);
    return rc;
}

int hpc_ofi_getname(struct hpc_ofi_ep *e, void *addr, size_t *len) {
    return fi_getname(&e->ep->fid, addr, len);
}

/* Inserts one address; its fi_addr in `*fi_addr`. 1 on success. */
int hpc_ofi_av_insert(struct hpc_ofi_ep *e, const void *addr, uint64_t *fi_addr) {
    fi_addr_t a = FI_ADDR_NOTAVAIL;
    int n = fi_av_insert(e->av, addr, 1, &a, 0, NULL);
    *fi_addr = a;
    return n;
}

/* Registers memory for remote read/write; with FI_MR_ENDPOINT binds and enables it. */
int hpc_ofi_mr_reg(struct hpc_ofi_ep *e, void *buf, size_t len, uint64_t requested_key,
                   struct fid_mr **mr, uint64_t *key, const char **what) {
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    *what = "fi_mr_reg";
    int rc = fi_mr_reg(e->domain, buf, len, access, 0, requested_key, 0, mr, NULL);
    if (rc)
        return rc;
    if (e->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        *what = "fi_mr_bind";
        rc = fi_mr_bind(*mr, &e->ep->fid, 0);
        if (!rc) {
            *what = "fi_mr_enable";
            rc = fi_mr_enable(*mr);
        }
        if (rc) {
            fi_close(&(*mr)->fid);
            return rc;
        }
    }
    *key = fi_mr_key(*mr);
    if (*key == FI_KEY_NOTAVAIL) {
        *what = "fi_mr_key";
        fi_close(&(*mr)->fid);
        return -FI_ENOKEY;
    }
    return 0;
}

int hpc_ofi_mr_close(struct fid_mr *mr) { return fi_close(&mr->fid); }

ssize_t hpc_ofi_tinject(struct hpc_ofi_ep *e, const void *buf, size_t len,
                        uint64_t dest, uint64_t tag) {
    return fi_tinject(e->ep, buf, len, dest, tag);
}

ssize_t hpc_ofi_tsend(struct hpc_ofi_ep *e, const void *buf, size_t len, uint64_t dest,
                      uint64_t tag, void *ctx) {
    return fi_tsend(e->ep, buf, len, NULL, dest, tag, ctx);
}

ssize_t hpc_ofi_trecv(struct hpc_ofi_ep *e, void *buf, size_t len, uint64_t src,
                      uint64_t tag, uint64_t ignore, void *ctx) {
    return fi_trecv(e->ep, buf, len, NULL, src, tag, ignore, ctx);
}

ssize_t hpc_ofi_write(struct hpc_ofi_ep *e, const void *buf, size_t len, uint64_t dest,
                      uint64_t addr, uint64_t key, void *ctx) {
    return fi_write(e->ep, buf, len, NULL, dest, addr, key, ctx);
}

ssize_t hpc_ofi_read(struct hpc_ofi_ep *e, void *buf, size_t len, uint64_t src,
                     uint64_t addr, uint64_t key, void *ctx) {
    return fi_read(e->ep, buf, len, NULL, src, addr, key, ctx);
}

/* A completion as the transport needs it. */
struct hpc_ofi_cqe {
    void *ctx;
    uint64_t flags;
    uint64_t len;
    uint64_t tag;
};

/* Reads up to `n` completions: count, 0 when none, -FI_EAVAIL when an error waits. */
ssize_t hpc_ofi_cq_read(struct hpc_ofi_ep *e, struct hpc_ofi_cqe *out, size_t n) {
    struct fi_cq_tagged_entry buf[16];
    if (n > 16)
        n = 16;
    ssize_t got = fi_cq_read(e->cq, buf, n);
    if (got == -FI_EAGAIN)
        return 0;
    for (ssize_t i = 0; i < got; i++) {
        out[i].ctx = buf[i].op_context;
        out[i].flags = buf[i].flags;
        out[i].len = buf[i].len;
        out[i].tag = buf[i].tag;
    }
    return got;
}

/* Reads one error completion: 1, or 0 when none; the provider's text in `msg`. */
ssize_t hpc_ofi_cq_readerr(struct hpc_ofi_ep *e, void **ctx, int *err, int *prov_errno,
                           char *msg, size_t msglen) {
    struct fi_cq_err_entry ee;
    memset(&ee, 0, sizeof ee);
    ssize_t rc = fi_cq_readerr(e->cq, &ee, 0);
    if (rc == -FI_EAGAIN)
        return 0;
    if (rc < 0)
        return rc;
    *ctx = ee.op_context;
    *err = ee.err;
    *prov_errno = ee.prov_errno;
    const char *s = fi_cq_strerror(e->cq, ee.prov_errno, ee.err_data, NULL, 0);
    snprintf(msg, msglen, "%s", s ? s : "");
    return 1;
}
