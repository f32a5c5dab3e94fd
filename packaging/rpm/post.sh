# bootlet %post ($1: 1 on install, 2 or more on upgrade). As the .deb's postinst: enable
# bootlet.service on install but never start it (it needs a bootstrap kubeconfig or a client
# certificate first, and an image build has neither); on upgrade `systemctl try-restart`:
# bootlet restarts once when it runs, stays stopped when it did not, and the kubelet is not
# touched (its drop-in has Wants=/After=bootlet.service, not Requires=/BindsTo=). Enabled
# directly, not through `systemctl preset`: a distribution's preset leaves a service it
# does not list disabled. The restart is here, in the new package's %post, rather than in
# the old one's %postun, so the version being installed decides how it is started.
# Without a running systemd (an image build in a chroot) only the enablement is done.
booted=false
[ -d /run/systemd/system ] && booted=true
$booted && systemctl daemon-reload >/dev/null 2>&1 || :
if [ "$1" -eq 1 ]; then
	systemctl enable bootlet.service >/dev/null 2>&1 || :
elif $booted; then
	systemctl try-restart bootlet.service >/dev/null 2>&1 || :
fi

# A unit in /etc/systemd/system (systemd/install.sh's copy) wins over the package's, with
# its own ExecStart: say so rather than delete what an operator installed.
unit=/etc/systemd/system/bootlet.service
if [ -f "$unit" ] && [ ! -L "$unit" ]; then
	echo "bootlet: $unit overrides the package's unit (and its ExecStart); to use the"
	echo "  package's: rm $unit /usr/local/bin/bootlet && systemctl daemon-reload"
fi

if [ "$1" -eq 1 ]; then
	cat <<'NEXT'
bootlet is installed and enabled (not started). Next:
  - put the bootstrap kubeconfig at /etc/kubernetes/bootstrap-kubelet.conf (or set
    bootstrapKubeconfig in /etc/bootlet/config.yaml), then: systemctl start bootlet
  - opt in to the kubelet using bootlet's certificate (see /usr/share/doc/bootlet); the
    kubelet then renews its own node Lease, so bootlet must not (two writers hide a dead
    kubelet):
    mkdir -p /etc/systemd/system/kubelet.service.d
    ln -sf /usr/share/bootlet/kubelet.service.d/20-bootlet.conf /etc/systemd/system/kubelet.service.d/
    sed -i 's/^renewLease: true$/renewLease: false/' /etc/bootlet/config.yaml
    systemctl daemon-reload && systemctl try-reload-or-restart bootlet && systemctl restart kubelet
NEXT
fi
exit 0
