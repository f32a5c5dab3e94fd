# bootlet %preun ($1: 0 on erase, 1 or more when an upgrade removes the old version). As
# the .deb's prerm and postrm: on erase, stop bootlet.service and disable it (an RPM has no
# purge: the enablement goes with the package). On upgrade bootlet keeps running (and keeps
# renewing the Lease) until the new version's %post restarts it.
if [ "$1" -eq 0 ]; then
	if [ -d /run/systemd/system ]; then
		systemctl disable --now bootlet.service >/dev/null 2>&1 || :
	else
		systemctl disable bootlet.service >/dev/null 2>&1 || :
	fi
fi
exit 0
