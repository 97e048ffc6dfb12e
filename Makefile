# flux-sdexec: `make check` runs every test tier this machine can run and says which ran.
# One interpreter for the broker's modules, flux's commands and the tests: flux's own (what
# `flux python` runs), else the distribution's, which make flux-core configures flux-core with.
ifeq ($(origin FLUX_PYTHON),undefined)
FLUX_PYTHON := $(shell flux python -c 'import sys; print(sys.executable)' 2>/dev/null || \
	echo /usr/bin/python3)
endif
PYTHON ?= $(FLUX_PYTHON)
# The developer's Python for the lint tools (black, flake8, vermin from pip).
DEV_PYTHON ?= python3
PREFIX ?= /usr/local
MODULE_DIR ?= $(PREFIX)/libexec/flux-sdexec
FLUX_SHELL ?= $(shell flux config builtin --installed shell_path 2>/dev/null)
FLUX_CMD_DIR ?= $(shell (flux config builtin --installed exec_path 2>/dev/null || \
	pkg-config --variable=fluxcmddir flux-core 2>/dev/null) | cut -d: -f1)
SHARNESS_TESTS := $(sort $(wildcard t/t[0-9]*.t))
# Man pages: reStructuredText in doc/man1 and doc/man5, built with docutils' rst2man
# (Debian python3-docutils, PyPI docutils); installed where `man` looks under PREFIX.
MANDIR ?= $(PREFIX)/share/man
RST2MAN ?= rst2man
MAN_PAGES := $(patsubst %.rst,%.1,$(wildcard doc/man1/*.rst)) \
	$(patsubst %.rst,%.5,$(wildcard doc/man5/*.rst))
# flux-security, then flux-core (configured with --with-flux-security and FLUX_PYTHON when
# given, else /usr/bin/python3: not the interpreter of a flux-core already there), from release
# tarballs; flux-core's build tree (FLUX_CORE_BUILD, default /var/tmp/flux-sdexec/<tarball
# name>) serves check-upstream and check-v2, which build it first when it is missing
# (scripts/setup.sh flux-tree: as root on Debian, else they name the command).
FLUX_SECURITY_TARBALL ?=
FLUX_CORE_TARBALL ?=
export PYTHON FLUX_CORE_TARBALL FLUX_SECURITY_TARBALL

# Debian packages: systemd and the test tools; our module's Python dependencies for the
# distribution's python3 (flux's interpreter: pystemd, cffi, and what flux's own commands
# import); pip, which installs vermin (a minimal Debian has none); munge, which signs jobs for flux-security's IMP; qemu and mmdebstrap for the v2
# guest (make vm).
DEB_DEPS := dbus dbus-user-session systemd libsystemd-dev pkg-config gcc make sharness perl procps \
	libhwloc15 libhwloc-plugins hwloc-nox python3 python3-pystemd python3-cffi python3-pytest python3-yaml \
	python3-jsonschema python3-docutils python3-pip munge curl ca-certificates \
	qemu-system-x86 qemu-utils mmdebstrap file
PIP_DEPS := vermin

.PHONY: check check-unit check-systemd check-flux check-chaos check-site check-upstream chaos \
	nodes-chaos deps flux-security flux-core install install-reconnect demo lint man doc-table \
	setup-check site-up site-down vm vm-prebuild check-v2 soak

check: setup-check vm-prebuild check-unit check-systemd check-flux check-chaos check-site check-v2

# `make check` and `make demo` first set up what they need (scripts/setup.sh): as root on
# Debian, what is missing is installed (make deps, then flux-security and flux-core from the
# tarballs scripts/tarball.sh picks: FLUX_*_TARBALL, ../shared/vendor, the published URL,
# sha256 checked), saying what and how long; otherwise nothing changes and it names the
# commands. (`make check-unit check-systemd` run the tiers that need no flux.)
setup-check:
	@scripts/setup.sh python systemd sharness flux vm

check-unit:
	@echo "== tier: unit tests (pure core)"
	@scripts/prereqs.sh python
	$(PYTHON) -m pytest -q t/unit

check-systemd:
	@echo "== tier: real-systemd tests (systemd user instance)"
	@scripts/prereqs.sh python systemd
	eval "$$(t/start-user-systemd.sh)" && $(PYTHON) -m pytest -q t/systemd

# Outside CI a machine without flux skips this tier, saying so; in CI it must run.
check-flux:
	@if ! command -v flux >/dev/null 2>&1 && [ "$${CI:-}" != true ]; then \
		echo "SKIP: flux-core not installed"; \
	else \
		echo "== tier: flux tests (sharness under flux start)"; \
		scripts/prereqs.sh flux sharness systemd python || exit 1; \
		eval "$$(t/start-user-systemd.sh)" && cd t && \
		../scripts/prove.sh $(notdir $(SHARNESS_TESTS)); \
	fi

# The chaos test (t/chaos/, doc/dev/chaos.md): jobs through sdexec on 2 brokers while systemd,
# the session bus and the module are disturbed; it disturbs the user manager for everyone on the
# machine. `make check` runs a short one with a fixed seed (CHECK_CHAOS_SEED; CHECK_CHAOS=no
# skips it, saying so); `make chaos` a long one (DURATION seconds, default 600; SEED, default
# random; LONG_STALL seconds of one systemd stall above the module's 25 s per-call deadline,
# default 40, 0 for none).
CHECK_CHAOS ?= yes
CHECK_CHAOS_SEED ?= 1
CHECK_CHAOS_DURATION ?= 45
DURATION ?= 600
SEED ?=
LONG_STALL ?= 40
CHAOS = PYTHONPATH=t $(PYTHON) -m chaos

check-chaos:
	@if [ "$(CHECK_CHAOS)" = no ]; then \
		echo "SKIP: chaos test: CHECK_CHAOS=no"; \
	elif ! command -v flux >/dev/null 2>&1 && [ "$${CI:-}" != true ]; then \
		echo "SKIP: chaos test: flux-core not installed"; \
	else \
		echo "== tier: chaos test ($(CHECK_CHAOS_DURATION) s, seed $(CHECK_CHAOS_SEED))"; \
		scripts/prereqs.sh flux systemd python || exit 1; \
		eval "$$(t/start-user-systemd.sh)" && \
		$(CHAOS) --seed $(CHECK_CHAOS_SEED) --duration $(CHECK_CHAOS_DURATION) --long-stall 0; \
	fi

chaos:
ifdef NODES
	@$(MAKE) --no-print-directory nodes-chaos
else
	@scripts/prereqs.sh flux systemd python
	eval "$$(t/start-user-systemd.sh)" && \
	$(CHAOS) --duration $(DURATION) --long-stall $(LONG_STALL) $(if $(SEED),--seed $(SEED))
endif

# `make chaos NODES=3` (or `make nodes-chaos`): the chaos test on NODES nodes of the site harness
# (root; t/site/nodes.sh up, t/site/nodes-chaos.sh, down), with node faults, jobs by METHODS in
# turn. It takes no lock: on a shared machine run it under both, e.g. `flock
# /tmp/sdexec-site.lock flock /tmp/sdexec-systemd.lock make chaos NODES=3 SEED=1`.
METHODS ?= bgexec,bulk-exec
nodes-chaos:
	@why=$$(t/site/site.sh why-not); [ -z "$$why" ] || { echo "nodes-chaos: cannot run: $$why"; exit 1; }
	t/site/nodes.sh up $(or $(NODES),3) || { t/site/nodes.sh down; exit 1; }; \
	t/site/nodes-chaos.sh --duration $(DURATION) --methods $(METHODS) $(if $(SEED),--seed $(SEED)); \
	rc=$$?; t/site/nodes.sh down; exit $$rc

check-upstream:
	@echo "== flux-core's own sdexec suites against our modules"
	@scripts/setup.sh systemd python flux-tree
	eval "$$(t/start-user-systemd.sh)" && scripts/check-upstream.sh

# Debian packages the module, the tests and the demo need, and vermin (pip, for the
# developer's python3) for make lint (root, Debian).
deps:
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(DEB_DEPS)
	PIP_BREAK_SYSTEM_PACKAGES=1 $(DEV_PYTHON) -m pip install -q --disable-pip-version-check \
		--root-user-action=ignore $(PIP_DEPS)

# Order: flux-security before flux-core (`make deps flux-security flux-core`).
flux-security:
	scripts/flux-security.sh

flux-core: $(if $(filter flux-security,$(MAKECMDGOALS)),flux-security)
	scripts/flux-core.sh

# A warning (an unknown role, a broken table) fails the build: the pages stay clean.
man: $(MAN_PAGES)

doc/man1/%.1: doc/man1/%.rst
	@command -v $(RST2MAN) >/dev/null || { echo "man: $(RST2MAN) not found;" \
		"make deps (Debian python3-docutils) or pip install docutils" >&2; exit 1; }
	$(RST2MAN) --halt=warning $< $@

doc/man5/%.5: doc/man5/%.rst
	@command -v $(RST2MAN) >/dev/null || { echo "man: $(RST2MAN) not found;" \
		"make deps (Debian python3-docutils) or pip install docutils" >&2; exit 1; }
	$(RST2MAN) --halt=warning $< $@

# The state table of doc/dev/design.md, generated from flux_sdexec/core/table.py (between its
# BEGIN and END lines); t/unit/test_table.py fails while it differs.
doc-table:
	$(PYTHON) scripts/state_table.py doc/dev/design.md

# The package for flux's own Python (the broker's modules and flux's commands run under it;
# a distribution's python3 is "externally managed": pip as root installs into /usr/local),
# the module files, and `flux sdexec` in flux-core's command directory, asked of flux
# itself (or pkg-config); FLUX_CMD_DIR=... overrides.
install: man install-reconnect
	@test -n "$(FLUX_CMD_DIR)" || { echo "install: cannot find flux's command directory" \
		"(no flux on PATH, no flux-core.pc); set FLUX_CMD_DIR" >&2; exit 1; }
	PIP_BREAK_SYSTEM_PACKAGES=1 $(FLUX_PYTHON) -m pip install --root-user-action=ignore .
	install -D -m 0644 flux_sdexec/modules/sdexec.py $(DESTDIR)$(MODULE_DIR)/sdexec.py
	install -D -m 0644 flux_sdexec/modules/sdexec-mapper.py $(DESTDIR)$(MODULE_DIR)/sdexec-mapper.py
	install -D -m 0755 cmd/flux-sdexec.py $(DESTDIR)$(FLUX_CMD_DIR)/flux-sdexec.py
	install -D -m 0644 doc/man1/flux-sdexec.1 $(DESTDIR)$(MANDIR)/man1/flux-sdexec.1
	install -D -m 0644 doc/man5/flux-config-sdexec.5 $(DESTDIR)$(MANDIR)/man5/flux-config-sdexec.5

# flux-shell-reconnect with flux's job shell (FLUX_SHELL) in it, quoted: a site names it in the
# IMP's allowed-shells, so as root it is installed root's, and refused (before anything else
# is installed) where a directory on its path is writable by another user
# (scripts/install-reconnect.sh). Each value goes to the script single-quoted (shquote).
shquote = '$(subst ','\'',$(1))'
install-reconnect:
	scripts/install-reconnect.sh cmd/flux-shell-reconnect.in $(call shquote,$(FLUX_SHELL)) \
		$(call shquote,$(DESTDIR)) $(call shquote,$(MODULE_DIR)/flux-shell-reconnect)

# The site tier: the sharness tests in t/site/ against a site brought up for them (and taken
# down after, also on failure). One SKIP line, saying why, where this machine cannot run it (not
# root, no flux-security, ...); in CI (CI=true) that is a failure.
# t011x run on N nodes (t/site/nodes.sh, NODES of them, 3 unless given).
SITE_TESTS := $(sort $(filter-out t/site/t011%,$(wildcard t/site/t[0-9]*.t)))
SITE_NODE_TESTS := $(sort $(wildcard t/site/t011*.t))
check-site:
	@why=$$(t/site/site.sh why-not); \
	if [ -n "$$why" ]; then \
		if [ "$${CI:-}" = true ]; then echo "FAIL: site tier cannot run: $$why"; exit 1; fi; \
		echo "SKIP: site tier: $$why"; \
	else \
		echo "== tier: site tests (system instance owned by flux, real IMP)"; \
		scripts/prereqs.sh flux sharness systemd || exit 1; \
		t/site/site.sh up || { t/site/site.sh down; exit 1; }; \
		(cd t/site && ../../scripts/prove.sh $(notdir $(SITE_TESTS))); rc=$$?; \
		t/site/site.sh down; [ $$rc = 0 ] || exit $$rc; \
		echo "== tier: site tests on $${NODES:-3} nodes (one broker, one systemd each)"; \
		t/site/nodes.sh up $${NODES:-3} || { t/site/nodes.sh down; exit 1; }; \
		(cd t/site && ../../scripts/prove.sh $(notdir $(SITE_NODE_TESTS))); rc=$$?; \
		t/site/nodes.sh down; exit $$rc; \
	fi

# The v2 tier: the host every site runs (systemd as pid 1 on unified cgroup v2), as a Debian
# guest under qemu (scripts/vm/, doc/dev/testing.md). `make vm` builds or refreshes the image of
# V2_RELEASE (bookworm, the default, or trixie: Debian 13, systemd 257, Linux 6.12; VM_DIR,
# default /var/tmp/flux-sdexec/v2vm, v2vm-trixie for trixie; rebuilt when its inputs change);
# check-v2 boots, for each release of V2_RELEASES (default both: `V2_RELEASES=bookworm`
# narrows it), two fresh copies of its image side by side (scripts/vm/check-v2.sh; every
# release's at once, scripts/vm/check-releases.sh) and runs t/v2/tier.sh there: flux-core's
# sdexec, sdmon and containment suites and our t0011 and t0032 in one, our other
# layout-dependent and usage tests and the production instance under flux.service in the
# other, which in make check boots during the host tiers and takes t0011 and t0032 too
# (V2_TIMEOUT: seconds a guest may run). One SKIP line where this machine cannot run a
# guest; in CI (CI=true) that is a failure. Without flux-core's build tree (FLUX_CORE_BUILD,
# else the newest make flux-core kept) make vm builds it first (make flux-core, from the
# tarball scripts/tarball.sh finds; it installs nothing); for a release other than this
# machine's, in a build root of that release (scripts/vm/release-lib.sh).
V2_TIMEOUT ?= 3000
V2_RELEASE ?= bookworm
V2_RELEASES ?= bookworm trixie
vm:
	V2_RELEASE=$(V2_RELEASE) scripts/vm/build.sh

# In make check, the images of V2_RELEASES are built in the background at nice 19 while the
# host tiers run, and each release's second guest boots as soon as its image is there
# (scripts/vm/prebuild.sh; stopped if make ends first); check-v2 waits for them.
vm-prebuild:
	@scripts/vm/prebuild.sh start $$PPID $(V2_RELEASES)

check-v2:
	@scripts/vm/prebuild.sh report
	@why=$$(scripts/vm/build.sh --why-not) || \
		why="scripts/vm/build.sh --why-not failed (exit $$?): run it to see why"; \
	if [ -n "$$why" ]; then \
		if [ "$${CI:-}" = true ]; then echo "FAIL: v2 tier cannot run: $$why"; exit 1; fi; \
		echo "SKIP: v2 tier: $$why"; \
	else \
		V2_TIMEOUT=$(V2_TIMEOUT) MAKE_PID=$$PPID scripts/vm/check-releases.sh $(V2_RELEASES); \
	fi

# The site harness (t/site/, doc/guide/install.md, "Deploying at a site"): as root, a system instance owned by
# the `flux` user, its non-root systemd manager, munge and the real IMP; site-down stops it all.
site-up:
	@if [ -n "$(NODES)" ]; then t/site/nodes.sh up $(NODES); else t/site/site.sh up; fi

site-down:
	t/site/nodes.sh down
	t/site/site.sh down

demo:
	@scripts/setup.sh flux systemd python
	eval "$$(t/start-user-systemd.sh)" && t/demo.sh

# The soak benchmark (bench/soak.sh, doc/dev/performance.md): KiB per job that each broker and
# our module's process grow over JOBS `true` jobs (default 5000) after WARMUP (200), under
# flux-core's C sdexec and under ours, in both orders (one 2-broker instance each). On a shared
# machine: `flock /tmp/sdexec-systemd.lock make soak`.
soak:
	@scripts/prereqs.sh flux systemd python
	bench/soak.sh

# black and flake8 at 100 columns; vermin checks that setup.py's python_requires (3.9)
# is the minimum the code needs (--eval-annotations: it also reads annotations)
lint:
	$(DEV_PYTHON) -m black --check -l 100 flux_sdexec t bench scripts/state_table.py
	$(DEV_PYTHON) -m flake8 --max-line-length 100 flux_sdexec t bench scripts/state_table.py
	vermin --no-tips --eval-annotations --violations -t=3.9- flux_sdexec
