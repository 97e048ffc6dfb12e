#!/bin/sh
test_description='resource containment: our sdexec-mapper, SDEXEC_R_LOCAL in sdexec, allowed-devices

Two brokers, [exec] sdexec-constrain-resources = true, so rc1 loads our
sdexec-mapper (conf.d/sdexec.toml names it) and job-exec sends each job shell
with SDEXEC_R_LOCAL. sdexec asks the mapper and starts the unit with the mapped
properties (logged with sdexec-debug). Where the user instance has no cpuset controller
(this machine'"'"'s hybrid layout) the post-start AllowedCPUs check then fails every
constrained job with EIO and drains its rank: that is tested as it is; where it has one
(unified, cpuset delegated: the v2 guest) the job runs.
Lookups pending across a disconnect or an unload, and allowed-devices: t0044.'

. "$(dirname "$0")/lib/sharness-sdexec.sh"
. "$SDEXEC_SRCDIR/t/lib/sharness-mapper.sh"

mapper_config t0011

sdexec_under_flux 2 jobs
. "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"
. "$SDEXEC_SRCDIR/t/lib/sharness-limits.sh"
# why AllowedCPUs is not enforced on this machine's layout (t0013 checks that it is not)
limits_probe cpuset
test_have_prereq CPUSET_APPLIED || test_set_prereq CPUSET_NOT_APPLIED
case $LAYOUT in
unified) CPUSET_REASON="unified: v2 cpuset.cpus.effective unavailable (is cpuset controller delegated to the user instance?)" ;;
*) CPUSET_REASON="$LAYOUT: v1 cpuset.cpus not read: the unit has no v1 cpuset cgroup (systemd sets AllowedCPUs only on cgroup v2)" ;;
esac

GIB8=8589934592
test -n "$(command -v hwloc-calc)" && test_set_prereq HWLOC_CALC
mapper_test_device

# ids IDSET-OR-LIST: the ids of "0-2,5" or "5,0,1,2", one per line, sorted.
ids() {
	flux python -c 'import sys
out = set()
for part in filter(None, sys.argv[1].split(",")):
    lo, _, hi = part.partition("-")
    out.update(range(int(lo), int(hi or lo) + 1))
print("\n".join(map(str, sorted(out))))' "$1"
}
rank1_log() {
	flux exec -r 1 flux dmesg
}

test_expect_success 'rc1 loaded our sdexec and sdexec-mapper on both ranks' '
	flux exec -r all flux module list -l >modules.out &&
	test $(grep -c "^sdexec-mapper .* $SDEXEC_MAPPER_MODULE\$" modules.out) -eq 2 &&
	test $(grep -c "^sdexec .* $SDEXEC_MODULE\$" modules.out) -eq 2
'
test_expect_success 'stats name the default mapper as flux-core does, the class built (ours), the allowed devices' '
	mapper_stats 1 | jq -c .config >stats.out &&
	cat >stats.expected <<-EOF &&
	{"mapper_class":"flux.sdexec.map.HwlocMapper","mapper_impl":"flux_sdexec.map.HwlocMapper","mapper_searchpath":"","allowed_device_patterns":["/dev/null","$PATTERN"],"allowed_devices":["/dev/null rw"]}
	EOF
	test_cmp stats.expected stats.out
'
test_expect_success 'save rank 1 topology and the job core count' '
	flux python -c "import flux; print(flux.Flux().rpc(\"resource.topo-get\", nodeid=1).get_str())" \
		>topo1.xml &&
	total=$(flux python -m flux_sdexec.map --xml topo1.xml | jq -r .AllowedCPUs) &&
	ids "$total" | wc -l >pus.total
'
test_expect_success 'lookup maps core 0 of rank 1 as the CLI does, memory scaled, devices added' '
	lookup 1 "$(r_local 1 0)" >lookup.out &&
	test_debug "cat lookup.out" &&
	flux python -m flux_sdexec.map --xml topo1.xml --cores 0 >cli.out &&
	jq -e ".AllowedCPUs == $(jq .AllowedCPUs cli.out)" lookup.out &&
	jq -e ".AllowedMemoryNodes == $(jq .AllowedMemoryNodes cli.out)" lookup.out &&
	jq -e ".DevicePolicy == \"closed\" and .DeviceAllow == \"/dev/null rw\"" lookup.out &&
	npus=$(ids "$(jq -r .AllowedCPUs lookup.out)" | wc -l) &&
	jq -e ".MemoryMax == \"$(($GIB8 * npus / $(cat pus.total)))\"" lookup.out
'
test_expect_success 'a percentage cap is exact bytes of the memory systemd scales by' '
	# issue 22: round(5 * npus / total)% was "0%" or "2%" here; the memory is MemTotal on
	# this machine (its root cgroup has no limit), in whole pages rounded down
	sdexec_set_config memory "$(printf "[exec]\nsdexec-properties = { MemoryMax = \"5%%\" }")" &&
	lookup 1 "$(r_local 1 0)" >percent.out &&
	sdexec_set_config memory &&
	test_debug "cat percent.out" &&
	npus=$(ids "$(jq -r .AllowedCPUs percent.out)" | wc -l) &&
	page=$(getconf PAGESIZE) &&
	pages=$(($(awk "/^MemTotal:/ {print \$2}" /proc/meminfo) * 1024 / page)) &&
	jq -e ".MemoryMax == \"$((pages * 5 * npus / (100 * $(cat pus.total)) * page))\"" percent.out
'
test_expect_success HWLOC_CALC 'the CPUs and NUMA nodes are what hwloc-calc says of core 0' '
	ids "$(hwloc-calc --if xml --input topo1.xml --physical-output --intersect PU core:0)" \
		>pu.expected &&
	ids "$(jq -r .AllowedCPUs lookup.out)" >pu.out &&
	test_cmp pu.expected pu.out &&
	ids "$(hwloc-calc --if xml --input topo1.xml --physical-output --intersect NUMAnode core:0)" \
		>numa.expected &&
	ids "$(jq -r .AllowedMemoryNodes lookup.out)" >numa.out &&
	test_cmp numa.expected numa.out
'
test_expect_success CPUSET_APPLIED 'a job shell unit starts with the mapped properties and runs: the kernel applies them' '
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	flux job wait-event -t $T $id clean &&
	test "$(flux job status $id; echo $?)" = 0 &&
	unit=shell-1-$(flux job id --to=f58plain $id).service &&
	rank1_log | sed -n "s/.* $unit: started with mapped properties //p" >mapped.json &&
	jq -e ".AllowedCPUs and .AllowedMemoryNodes and .DevicePolicy and .DeviceAllow and .MemoryMax" \
		mapped.json
'
test_expect_success CPUSET_NOT_APPLIED 'a job shell unit starts with the mapped properties, fails its check, drains' '
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	job_exception $id >note.out &&
	host=$(flux exec -r 1 hostname) &&
	reason="AllowedCPUs not enforced: $CPUSET_REASON" &&
	grep -F "sdexec constraint check failed on $host (rank 1): $reason" note.out &&
	flux resource drain -n -o "{ranks} {reason}" >drain.out &&
	test_debug "cat drain.out" &&
	grep -F "1 sdexec constraint check failed on $host for job $id: $reason" drain.out &&
	flux resource undrain 1 &&
	unit=shell-1-$(flux job id --to=f58plain $id).service &&
	rank1_log >rank1.log &&
	grep -F "$unit: post-start check failed: $reason" rank1.log &&
	sed -n "s/.* $unit: started with mapped properties //p" rank1.log >mapped.json &&
	test_debug "cat mapped.json" &&
	core=$(flux job info $id R | jq -r ".execution.R_lite[0].children.core") &&
	lookup 1 "$(r_local 1 $core)" >lookup.job &&
	jq -S . mapped.json >mapped.sorted &&
	jq -S . lookup.job >lookup.sorted &&
	test_cmp lookup.sorted mapped.sorted &&
	jq -e ".AllowedCPUs and .AllowedMemoryNodes and .DevicePolicy and .DeviceAllow and .MemoryMax" \
		mapped.json
'
# the process outlives the check (SIGKILLed by its failure): one that has exited before it
# has no cgroup left to read, and runs as not-checkable (doc/guide/containment.md)
test_expect_success CPUSET_NOT_APPLIED 'an exec with SDEXEC_R_LOCAL fails the same check with EIO' '
	test_expect_code 1 $sdexec -r 1 --setopt=SDEXEC_R_LOCAL="$(r_local 1 0)" sleep 60 \
		2>eio.err &&
	grep "AllowedCPUs not enforced" eio.err
'
test_expect_success 'a mapper error reaches the client: unknown core named' '
	test_must_fail lookup 1 "$(r_local 1 999)" 2>lookup999.err &&
	grep "core 999 not found in node topology" lookup999.err &&
	# ENOENT: flux exec exits 127, as for a missing command
	test_expect_code 127 $sdexec -r 1 --setopt=SDEXEC_R_LOCAL="$(r_local 1 999)" true \
		2>exec999.err &&
	grep "resource mapping failed: failed to map cores: core 999 not found" exec999.err
'
test_expect_success 'a job whose mapping fails gets an exception naming the core' '
	cat >shifted.py <<-EOF &&
	from flux_sdexec.map import HwlocMapper
	from flux_sdexec.core.values import parse_idset


	class Shifted(HwlocMapper):
	    """A site mapper with a bug: it asks for the cores 1000 ids too high."""

	    def map_cores(self, cores):
	        return super().map_cores(",".join(str(i + 1000) for i in parse_idset(cores)))
	EOF
	sdexec_set_config mapper "$(printf "[sdexec]\nmapper = \"shifted.Shifted\"\nmapper-searchpath = \"%s\"" "$PWD")" &&
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	job_exception $id >shifted.note &&
	grep "resource mapping failed: failed to map cores: core 100[01] not found" shifted.note &&
	flux resource drain -n -o "{ranks}" >drain2.out &&
	test_must_be_empty drain2.out &&
	sdexec_set_config mapper
'
test_expect_success 'with the mapper unloaded a job fails with a clear reason' '
	flux exec -r 1 flux module remove sdexec-mapper &&
	id=$(flux submit -N1 -n1 --requires=rank:1 true) &&
	job_exception $id >unloaded.note &&
	grep "sdexec-mapper module is not loaded" unloaded.note &&
	grep "exec.sdexec-constrain-resources" unloaded.note &&
	flux exec -r 1 flux module load $SDEXEC_MAPPER_MODULE
'
test_expect_success 'a custom mapper from mapper-searchpath shows in stats and maps' '
	mkdir site &&
	cat >site/sitemap.py <<-EOF &&
	from flux_sdexec.map import ResourceMapper


	class SiteMapper(ResourceMapper):
	    def __init__(self, xml, rank=0):
	        super().__init__(rank)

	    def map_cores(self, cores):
	        return {"MemoryHigh": "1G"}
	EOF
	sdexec_set_config mapper "$(printf "[sdexec]\nmapper = \"sitemap.SiteMapper\"\nmapper-searchpath = \"%s\"" "$PWD/site")" &&
	mapper_stats 0 >site.stats &&
	jq -e ".config.mapper_class == \"sitemap.SiteMapper\"" site.stats &&
	jq -e ".config.mapper_impl == \"sitemap.SiteMapper\"" site.stats &&
	jq -e ".config.mapper_searchpath == \"$PWD/site\"" site.stats &&
	lookup 0 "$(r_local 0 0)" >site.lookup &&
	jq -c . site.lookup >site.out &&
	echo "{\"DeviceAllow\":\"/dev/null rw\",\"DevicePolicy\":\"closed\",\"MemoryHigh\":\"1G\"}" \
		>site.expected &&
	test_cmp site.expected site.out
'
test_expect_success 'flux-core'"'"'s own HwlocMapper, named in sdexec.mapper, loads and agrees' '
	sdexec_set_config mapper "$(printf "[sdexec]\nmapper = \"flux.sdexec.map.HwlocMapper\"")" &&
	mapper_stats 0 >flux-core.stats &&
	jq -e ".config.mapper_class == \"flux.sdexec.map.HwlocMapper\"" flux-core.stats &&
	jq -e ".config.mapper_impl == \"flux.sdexec.map.HwlocMapper\"" flux-core.stats &&
	lookup 0 "$(r_local 0 0)" >flux-core.out &&
	sdexec_set_config mapper &&
	lookup 0 "$(r_local 0 0)" >ours.out &&
	test_debug "cat flux-core.out ours.out" &&
	test_cmp flux-core.out ours.out
'

test_expect_success 'no unit of this instance is left' '
	sdexec_check_no_units
'
test_done
