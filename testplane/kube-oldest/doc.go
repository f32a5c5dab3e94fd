// Command kube, the oldest supported release: bootlet's test control plane built the same
// way as testplane/kube (one multi-call binary, the first argument or the name it runs as
// picks the component) from k8s.io/kubernetes at the oldest minor bootlet supports, so the
// core real-cluster set (tests/kube/oldest.rs) runs against both ends of the range.
//
//	kube etcd --data-dir DIR --listen-client-urls URL
//	kube kube-apiserver FLAGS...
//	kube kube-controller-manager FLAGS...
//	kube kubectl ARGS...
//
// Only the core set: core.go (the dispatch, etcd, kube-apiserver, kube-controller-manager)
// is testplane/kube's own file (a symbolic link), compiled unchanged against this release;
// kubectl.go is this release's cmd/kubectl main. The hollow kubelet, the kubelet, kubeadm and
// kube-scheduler stay with the newest release; the tests that need them (kube_kubeadm,
// kube_restore, the kubelet comparisons) run there.
package main
