# bootlet %postun ($1: 0 on erase, 1 or more on upgrade). daemon-reload, so systemd forgets
# the removed unit. On erase, the directories this package created go when empty
# (cargo-generate-rpm cannot list a directory as the package's own); /etc/bootlet stays
# when an edited config.yaml was kept as config.yaml.rpmsave.
#
# The node's identity is never touched: the cert dir (/var/lib/kubelet/pki), the
# kubeconfig (/etc/kubernetes/kubelet.conf) and the bootstrap kubeconfig are the kubelet's
# files, not this package's. Removing bootlet must never unjoin a node; the kubelet keeps
# using the certificate it has.
[ -d /run/systemd/system ] && systemctl daemon-reload >/dev/null 2>&1 || :
if [ "$1" -eq 0 ]; then
	for d in /usr/share/bootlet/kubelet.service.d /usr/share/bootlet/prometheus \
		/usr/share/bootlet /usr/share/doc/bootlet/docs /usr/share/doc/bootlet \
		/usr/share/licenses/bootlet /etc/bootlet; do
		rmdir "$d" 2>/dev/null || :
	done
	dropin=/etc/systemd/system/kubelet.service.d/20-bootlet.conf
	if [ -L "$dropin" ] && [ ! -e "$dropin" ]; then
		echo "bootlet: $dropin now points nowhere: at its next restart the kubelet starts"
		echo "  without it (its own certificate rotation, same identity files); rm $dropin"
	fi
	echo "bootlet: the node's identity is kept: /var/lib/kubelet/pki and /etc/kubernetes/kubelet.conf"
fi
exit 0
