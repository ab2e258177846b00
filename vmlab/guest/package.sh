# The package checks (sourced by main): install, layout, remove, reinstall, purge.
DEB=$LAB/mergetune.deb

deb_install() {
    cp "$DEB" /root/mergetune.deb
    # ./ makes it a file, not a package name; the guest has no network and needs none.
    (cd /root && apt-get install -y ./mergetune.deb) || fail "apt-get install ./mergetune.deb failed"
    dpkg -s mergetune | grep -q '^Status: install ok installed' || fail "dpkg -s: not installed"
}

install_started() {
    # Debian's default for a daemon: enabled and started by postinst (docs/operator.md).
    wait_for 30 systemctl is-active --quiet "$UNIT" || fail "not active after install: $(systemctl is-active "$UNIT")"
    [ "$(systemctl is-enabled "$UNIT")" = enabled ] || fail "not enabled: $(systemctl is-enabled "$UNIT")"
}

deb_layout() {
    local unitfile
    unitfile="$(systemctl show -P FragmentPath "$UNIT")"
    echo "unit: $unitfile"
    case "$unitfile" in /lib/systemd/system/*|/usr/lib/systemd/system/*) ;; *) fail "unit at $unitfile" ;; esac
    grep -q '^ExecStart=/usr/bin/mergetune run --config /etc/mergetune/mergetune.toml$' "$unitfile" || fail "ExecStart does not name /usr/bin/mergetune"
    [ -x /usr/bin/mergetune ] || fail "/usr/bin/mergetune missing"
    grep -qx /etc/mergetune/mergetune.toml /var/lib/dpkg/info/mergetune.conffiles || fail "config is not a conffile"
    for f in operator.md hardening.md metrics.md policy.md mergetune.json copyright changelog.gz; do
        [ -f "/usr/share/doc/mergetune/$f" ] || fail "/usr/share/doc/mergetune/$f missing"
    done
    /usr/bin/mergetune check-config /etc/mergetune/mergetune.toml || fail "shipped config rejected"
}

# Runs the hostile load on $FAST until mergetune has written something (nomerges 2).
actuate() {
    hostile_load_start "$FAST"
    wait_for 90 nomerges_is "$FAST" 2
    local rc=$?
    hostile_load_stop
    [ $rc = 0 ] || fail "$FAST nomerges still $(nomerges_of "$FAST") after 90 s of random reads"
}

remove_restores() {
    systemctl start "$UNIT" || fail "start failed"
    actuate || return 1
    apt-get remove -y mergetune || fail "apt-get remove failed"
    originals_in_place "$OUT/originals.txt" || return 1
    [ ! -e /usr/bin/mergetune ] || fail "binary left after remove"
    [ -f /etc/mergetune/mergetune.toml ] || fail "conffile gone after remove (only purge removes it)"
    ! systemctl is-active --quiet "$UNIT" || fail "still active after remove"
}

# A fleet installs in dry run (docs/fleet.md, "Rolling out"): the drop-in in place before
# the package, which enables and starts the service; under random reads (the lab config
# steps down in seconds) it decides and writes nothing, from its first start. Removed
# again after, with its drop-in.
dry_run_install() {
    local rc=0 dropin=/etc/systemd/system/mergetune.service.d/dry-run.conf
    mkdir -p "$(dirname "$dropin")"
    printf '[Service]\nEnvironment=MERGETUNE_DRY_RUN=1\n' > "$dropin"
    (cd /root && apt-get install -y ./mergetune.deb) || rc=1
    [ $rc = 0 ] && { wait_for 30 systemctl is-active --quiet "$UNIT" || rc=2; }
    if [ $rc = 0 ]; then
        hostile_load_start "$FAST"
        sleep 30
        hostile_load_stop
        nomerges_is "$FAST" 0 || rc=3
        [ ! -e /run/mergetune/state.json ] || rc=4
        metrics | grep -q '^mergetune_dry_run 1' || rc=5
        journalctl -u "$UNIT" --no-pager -n 400 | grep -q 'dry-run: decisions are logged, nothing is written' || rc=6
        figure dry_run_install_would_write "$(journalctl -u "$UNIT" --no-pager -n 400 | grep -c 'would write' || true)"
    fi
    apt-get remove -y mergetune >/dev/null 2>&1 || true
    rm -f "$dropin"
    rmdir "$(dirname "$dropin")" 2>/dev/null || true
    systemctl daemon-reload
    case $rc in
        0) ;;
        1) fail "apt-get install with the dry-run drop-in failed" ;;
        2) fail "not active after install with the dry-run drop-in" ;;
        3) fail "$FAST nomerges $(nomerges_of "$FAST"): the dry-run install wrote" ;;
        4) fail "the dry-run install wrote its state file" ;;
        5) fail "mergetune_dry_run is not 1" ;;
        6) fail "the journal does not say dry-run" ;;
    esac
}

reinstall() {
    (cd /root && apt-get install -y ./mergetune.deb) || fail "reinstall failed"
    wait_for 30 systemctl is-active --quiet "$UNIT" || fail "not active after reinstall"
    [ "$(systemctl is-enabled "$UNIT")" = enabled ] || fail "not enabled after reinstall"
}

purge_leaves_nothing() {
    actuate || return 1
    apt-get purge -y mergetune || fail "apt-get purge failed"
    originals_in_place "$OUT/originals.txt" || return 1
    local left
    left="$(ls -d /usr/bin/mergetune /etc/mergetune /run/mergetune /lib/systemd/system/mergetune.service \
        /usr/lib/systemd/system/mergetune.service /usr/share/doc/mergetune \
        /etc/systemd/system/multi-user.target.wants/mergetune.service 2>/dev/null)"
    [ -z "$left" ] || fail "left after purge: $(echo $left)"
    ! dpkg -s mergetune >/dev/null 2>&1 || fail "dpkg still knows mergetune"
    pgrep -x mergetune >/dev/null && fail "a mergetune process still runs"
    return 0
}
