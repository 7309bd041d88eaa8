/* SPDX-License-Identifier: MIT */
/*
 * NUMA placement for the fetcher with hwloc: the node(s) closest to the block
 * device that holds the checkpoint, or every node when the device is not in
 * the topology. The plan is a pure function of a loaded topology (tests feed
 * synthetic/XML 2-node topologies); applying it is a thin wrapper.
 */
#pragma once

#include <hwloc.h>
#include <stddef.h>

/* Block device name ("nvme0n1", "vda") of the filesystem holding `path` (partitions are
 * mapped to their disk). Returns 0, or a negative errno when it cannot be found. */
int dsv4_fetcher_numa_blockdev(const char *path, char *name, size_t n);

/* Fill `cpus` and `nodes` with the locality of block device `dev` in `topo`, or with the
 * whole machine when dev is NULL or absent. Returns 1 when the device was found, 0 for the
 * fallback. `why` gets one line for the log. */
int dsv4_fetcher_numa_plan(hwloc_topology_t topo, const char *dev, hwloc_cpuset_t cpus,
                           hwloc_nodeset_t nodes, char *why, size_t why_len);

/* Load this machine's topology with I/O devices (HWLOC_SYNTHETIC / HWLOC_XMLFILE apply). */
int dsv4_fetcher_numa_topology(hwloc_topology_t *ret);
