# flux-sdexec: `make check` runs every test tier this machine can run and says which ran.
PYTHON ?= python3
PREFIX ?= /usr/local
MODULE_DIR ?= $(PREFIX)/libexec/flux-sdexec
SHARNESS_TESTS := $(sort $(wildcard t/t[0-9]*.t))

.PHONY: check check-unit check-systemd check-flux install demo lint

check: check-unit check-systemd check-flux

check-unit:
	@echo "== tier: unit tests (pure core)"
	$(PYTHON) -m pytest -q t/unit

check-systemd:
	@echo "== tier: real-systemd tests (systemd user instance)"
	eval "$$(t/start-user-systemd.sh)" && $(PYTHON) -m pytest -q t/systemd

check-flux:
	@if ! command -v flux >/dev/null 2>&1; then \
		echo "SKIP: flux-core not installed"; \
	else \
		echo "== tier: flux tests (sharness under flux start)"; \
		eval "$$(t/start-user-systemd.sh)" && cd t && \
		prove --timer $(addprefix ../,$(SHARNESS_TESTS)); \
	fi

install:
	$(PYTHON) -m pip install .
	install -D -m 0644 flux_sdexec/modules/sdexec.py $(DESTDIR)$(MODULE_DIR)/sdexec.py
	install -D -m 0644 flux_sdexec/modules/sdexec-mapper.py $(DESTDIR)$(MODULE_DIR)/sdexec-mapper.py

demo:
	eval "$$(t/start-user-systemd.sh)" && t/demo.sh

lint:
	$(PYTHON) -m black --check -l 100 flux_sdexec t
