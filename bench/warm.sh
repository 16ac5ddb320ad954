#!/usr/bin/env bash
# bench/warm.sh — touch the machine's free memory once before measuring (bench/README.md,
# "A fresh VM's memory").
#
# On the benchmark VM (Firecracker, a virtio balloon with free page reporting) guest memory is
# backed lazily by the host: the first write to a page of guest RAM since the VM booted costs
# ~4.7 µs more than any later one (measured 2026-12-02: 3 GB written into tmpfs took 5.24 s on
# a fresh VM, 1.4–1.6 s the next times; freed and rewritten 20 s later, still fast). A broker's
# page cache grows into such memory as it writes its log, so on a fresh VM every 4 KiB of log
# costs ~4.7 µs of kernel CPU in the copy into the page cache (~0.17 µs per 150-byte record):
# a replicated run paid it twice (the master's and the slave's copies: `perf record` of the
# slave showed copy_folio_from_iter_atomic at 51% of its CPU, 12% once the memory was warm).
# A machine that has run for a while has touched its memory; a fresh VM has not, and the first
# benchmarks after boot measure the hypervisor. So the bench scripts call this first.
#
# The balloon also reports freed memory back to the host (free page reporting: `reported_kib` in
# /sys/module/page_reporting/parameters had reached 176 GB on a 24 GiB VM up one hour), after
# which those pages are cold again: a run that frees a data directory can hand the next run cold
# memory (replica runs started without warming after other benchmarks measured 0.22–0.61 µs per
# message against ~0.17 warm). So, as root, it first sets page_reporting_order above the largest
# page order (11), which stops the reporting for as long as the VM runs — the memory then stays
# backed, as on a machine without a balloon.
#
# It then writes zeros into a file in /dev/shm as large as the memory available minus a reserve
# (capped by the tmpfs's free space), then deletes it: the kernel frees the pages and the next
# allocations (page cache, heaps) reuse touched memory. ~50 s on a fresh 24 GiB VM. With the
# reporting off the memory stays warm, so that is done once per boot: a marker in /dev/shm
# holding the boot id skips it afterwards (WARM=force touches again; WARM=0 skips it).
#
# Usage: bench/warm.sh            (or source it and call warm_memory)
set -euo pipefail

warm_memory() {
	[[ ${WARM:-1} == 0 ]] && return 0
	local pro=/sys/module/page_reporting/parameters/page_reporting_order
	local marker=/dev/shm/.metaq-warm boot off=0
	boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo unknown)
	if [[ -w $pro ]] && [[ $(cat "$pro") != 11 ]]; then
		echo 11 >"$pro" 2>/dev/null && echo "warm.sh: free page reporting off (page_reporting_order 11)" >&2
	fi
	[[ -r $pro && $(cat "$pro") == 11 ]] && off=1
	if ((off)) && [[ ${WARM:-1} != force && -f $marker && $(cat "$marker") == "$boot" ]]; then
		return 0 # touched since boot with the reporting off: still warm
	fi
	local avail_kb shm_kb reserve_kb=$((2 * 1024 * 1024)) mb f
	avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
	shm_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
	[[ -n $avail_kb && -n $shm_kb ]] || return 0
	mb=$(((avail_kb - reserve_kb) / 1024))
	((mb > shm_kb / 1024 - 64)) && mb=$((shm_kb / 1024 - 64))
	((mb > 0)) || return 0
	f=$(mktemp /dev/shm/metaq-warm.XXXXXX)
	local t0=$SECONDS
	dd if=/dev/zero of="$f" bs=1M count="$mb" status=none 2>/dev/null || true
	rm -f "$f"
	((off)) && echo "$boot" >"$marker"
	echo "warm.sh: touched ${mb} MB of free memory in $((SECONDS - t0)) s" >&2
}

# Steal time: the share of the run's CPU time in which the hypervisor ran something else on this
# VM's cores (the "steal" column of /proc/stat; bench/README.md, Caveats, "Steal time"). Above a
# few percent the machine is shared and every figure of the run is noisier and slower; the scripts
# print it next to their results. steal_mark prints a mark (total and steal ticks: the columns
# user to steal; guest time is already in user, as `metaq bench accumulation` counts it);
# steal_pct MARK prints the steal share since it, in percent.
steal_mark() { awk '$1 == "cpu" {t = 0; for (i = 2; i <= 9; i++) t += $i; print t, $9; exit}' /proc/stat; }
steal_pct() {
	local t0 s0 t1 s1
	read -r t0 s0 <<<"$1"
	read -r t1 s1 < <(steal_mark)
	awk -v t="$((t1 - t0))" -v s="$((s1 - s0))" 'BEGIN {if (t > 0) printf "%.1f", 100 * s / t; else printf "n/a"}'
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	warm_memory
fi
