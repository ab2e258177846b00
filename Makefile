# mergetune: build, install and uninstall.
#
#   make                      # cargo build --release
#   sudo make install         # binary, unit, example config (kept if present), docs, dashboard
#   sudo make uninstall       # stops the service (which restores every original value), removes
#                             # what install put in place; keeps /etc/mergetune unless PURGE=1
#   make deb                  # target/deb/mergetune_<version>_<arch>.deb (packaging/build-deb:
#                             # this install, staged under /usr, plus maintainer scripts; lintian
#                             # when installed). The VM lab installs it: vmlab/run
#
# DESTDIR stages into a directory (packaging); PREFIX moves the binary and docs (the unit's
# paths follow). BIN picks another binary than target/release/mergetune.

PREFIX  ?= /usr/local
DESTDIR ?=
BINDIR  ?= $(PREFIX)/bin
DOCDIR  ?= $(PREFIX)/share/doc/mergetune
UNITDIR ?= /etc/systemd/system
CONFDIR ?= /etc/mergetune
CARGO   ?= cargo
BIN     ?= target/release/mergetune
PURGE   ?=

DOCS = docs/operator.md docs/metrics.md docs/hardening.md docs/policy.md docs/fleet.md docs/design.md config/grafana/mergetune.json
MIXIN = config/mixin/prometheus_alerts.yaml config/mixin/prometheus_rules.yaml

.PHONY: all build install uninstall deb

all: build

build:
	$(CARGO) build --release --locked

# The package is `make install DESTDIR=stage PREFIX=/usr UNITDIR=/lib/systemd/system`: the
# same unit file, the same rewriting of its paths.
deb: build
	packaging/build-deb --no-build --bin "$(BIN)" $$(command -v lintian >/dev/null && echo --lintian)

install:
	@test -x "$(BIN)" || { echo "$(BIN) not found: run make (as your user) first" >&2; exit 1; }
	install -D -m 0755 "$(BIN)" "$(DESTDIR)$(BINDIR)/mergetune"
	install -d -m 0755 "$(DESTDIR)$(UNITDIR)" "$(DESTDIR)$(CONFDIR)" "$(DESTDIR)$(DOCDIR)"
	sed -e "s#/usr/local/bin/mergetune#$(BINDIR)/mergetune#g" \
	    -e "s#/usr/local/share/doc/mergetune#$(DOCDIR)#g" \
	    -e "s#/etc/mergetune/#$(CONFDIR)/#g" \
	    systemd/mergetune.service > "$(DESTDIR)$(UNITDIR)/mergetune.service"
	chmod 0644 "$(DESTDIR)$(UNITDIR)/mergetune.service"
	@if [ -e "$(DESTDIR)$(CONFDIR)/mergetune.toml" ]; then \
	    echo "$(DESTDIR)$(CONFDIR)/mergetune.toml exists: kept (the new example is $(DOCDIR)/mergetune.toml.example)"; \
	else \
	    install -m 0644 config/mergetune.toml "$(DESTDIR)$(CONFDIR)/mergetune.toml"; \
	fi
	install -m 0644 config/mergetune.toml "$(DESTDIR)$(DOCDIR)/mergetune.toml.example"
	install -m 0644 $(DOCS) "$(DESTDIR)$(DOCDIR)/"
	install -d -m 0755 "$(DESTDIR)$(DOCDIR)/mixin"
	install -m 0644 $(MIXIN) "$(DESTDIR)$(DOCDIR)/mixin/"
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "installed. Next: mergetune run --once --dry-run; then systemctl enable --now mergetune"

uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then \
	    systemctl disable --now mergetune.service 2>/dev/null || true; \
	fi
	@# Stopped or not: put back anything a previous run left changed.
	@if [ -z "$(DESTDIR)" ] && [ -x "$(BINDIR)/mergetune" ]; then "$(BINDIR)/mergetune" restore || true; fi
	rm -f "$(DESTDIR)$(BINDIR)/mergetune" "$(DESTDIR)$(UNITDIR)/mergetune.service"
	rm -rf "$(DESTDIR)$(DOCDIR)"
	@if [ -n "$(PURGE)" ]; then rm -rf "$(DESTDIR)$(CONFDIR)"; \
	else echo "kept $(DESTDIR)$(CONFDIR) (PURGE=1 removes it)"; fi
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
