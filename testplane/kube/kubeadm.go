package main

// kubeadm: cmd/kubeadm of the pinned release, unmodified. Run as `kube kubeadm ARGS` or
// through a link named kubeadm (main dispatches on the name the binary was run as).

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

func init() {
	components["kubeadm"] = runKubeadm
}

// runKubeadm is cmd/kubeadm's main: HandleError prints the error and exits non-zero.
func runKubeadm(_ []string) int {
	kubeadmerrors.HandleError(app.Run())
	return 0
}
