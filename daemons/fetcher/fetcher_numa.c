/* SPDX-License-Identifier: MIT */
/*
 * Locality of the checkpoint's block device: stat → /sys/dev/block/M:m →
 * device name → hwloc OS device of type BLOCK → first non-I/O ancestor →
 * its cpuset and nodeset. Falls back to the whole machine.
 */
#include "fetcher_numa.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int dsv4_fetcher_numa_blockdev(const char *path, char *name, size_t n)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return -errno;
    char link[PATH_MAX], target[PATH_MAX];
    snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(st.st_dev), minor(st.st_dev));
    ssize_t len = readlink(link, target, sizeof(target) - 1);
    if (len < 0)
        return -errno;
    target[len] = 0;
    /* A partition's sysfs dir sits inside its disk's: .../nvme0n1/nvme0n1p2. */
    char part[PATH_MAX + 16];
    snprintf(part, sizeof(part), "%s/partition", link);
    if (access(part, F_OK) == 0) {
        char *slash = strrchr(target, '/');
        if (slash)
            *slash = 0;
    }
    snprintf(name, n, "%s", basename(target));
    return 0;
}

int dsv4_fetcher_numa_plan(hwloc_topology_t topo, const char *dev, hwloc_cpuset_t cpus,
                           hwloc_nodeset_t nodes, char *why, size_t why_len)
{
    hwloc_obj_t os = NULL;
    while (dev && (os = hwloc_get_next_osdev(topo, os)))
        if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_BLOCK && os->name && !strcmp(os->name, dev))
            break;
    hwloc_obj_t anc = os ? hwloc_get_non_io_ancestor_obj(topo, os) : NULL;
    if (anc && anc->cpuset && anc->nodeset && !hwloc_bitmap_iszero(anc->nodeset)) {
        hwloc_bitmap_copy(cpus, anc->cpuset);
        hwloc_bitmap_copy(nodes, anc->nodeset);
        char *s = NULL;
        hwloc_bitmap_list_asprintf(&s, nodes);
        snprintf(why, why_len, "block device %s is local to NUMA node(s) %s", dev, s ? s : "?");
        free(s);
        return 1;
    }
    hwloc_obj_t root = hwloc_get_root_obj(topo);
    hwloc_bitmap_copy(cpus, root->cpuset);
    hwloc_bitmap_copy(nodes, root->nodeset);
    snprintf(why, why_len, "block device %s not in the topology: all %d NUMA node(s)",
             dev ? dev : "(unknown)", hwloc_bitmap_weight(nodes));
    return 0;
}

int dsv4_fetcher_numa_topology(hwloc_topology_t *ret)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) < 0)
        return -errno;
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(t) < 0) {
        int rc = -errno;
        hwloc_topology_destroy(t);
        return rc;
    }
    *ret = t;
    return 0;
}
