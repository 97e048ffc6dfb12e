# flux-sdexec: helpers shared by t0011 and t0044 (our sdexec-mapper).
# Source after sharness-sdexec.sh: mapper_config before sdexec_under_flux, the rest inside.

# mapper_config NAME: the instance config of the mapper tests, in NAME.toml; its second
# allowed-devices pattern is unique to this run (NAME and the outer run's pid).
mapper_config() {
	sdexec_extra_config $1.toml <<-EOF
	[exec]
	service = "sdexec"
	sdexec-constrain-resources = true
	sdexec-properties = { MemoryMax = "8G" }

	[systemd]
	sdexec-debug = true

	[sdexec]
	allowed-devices = ["/dev/null", "/dev/sdexec-$1-$$-*"]
	EOF
}
# mapper_test_device: PATTERN, the config's pattern unique to this run, and TESTDEV, a
# device node path it matches (removed at the end).
mapper_test_device() {
	PATTERN=$(flux config get | jq -r '.sdexec."allowed-devices"[1]')
	TESTDEV=${PATTERN%\*}dev
	cleanup "rm -f $TESTDEV"
}

# lookup RANK R: the sdexec-mapper.lookup reply of RANK for R (JSON, sorted keys).
lookup() {
	flux python -c 'import flux, json, sys
f = flux.Flux().rpc("sdexec-mapper.lookup", {"R": sys.argv[2]}, nodeid=int(sys.argv[1]))
print(json.dumps(f.get(), sort_keys=True))' "$1" "$2"
}
# r_local RANK CORES: R for CORES of RANK, as job-exec sends it.
r_local() {
	flux R encode --ranks="$1" --cores="$2"
}
mapper_stats() {
	flux exec -r "$1" flux module stats sdexec-mapper
}
