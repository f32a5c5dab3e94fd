package main

// fake-cri: the fake CRI runtime of the kubelet entry (k8s.io/cri-client/pkg/fake, as
// kubemark uses it) served on an endpoint of one's choosing, e.g. as a stand-in for
// containerd.service on a test node:
//
//	kube fake-cri --listen unix:///var/run/containerd/containerd.sock
//
// kubeadm's CRI and ContainerRuntimeVersion preflight checks then talk to a runtime that
// answers (Version, Status with RuntimeReady and NetworkReady, RuntimeConfig) instead of
// failing to connect; they are errors, not warnings, in kubeadm v1.37. The kubelet entry
// keeps its own private fake runtime whatever containerRuntimeEndpoint says, so that the
// kubelet never waits for this one.

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	fakeremote "k8s.io/cri-client/pkg/fake"
)

func init() {
	components["fake-cri"] = runFakeCRI
}

func runFakeCRI(args []string) int {
	fs := flag.NewFlagSet("fake-cri", flag.ContinueOnError)
	listen := fs.String("listen", "unix:///var/run/containerd/containerd.sock", "CRI endpoint to serve (unix socket)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	runtime := fakeremote.NewFakeRemoteRuntime()
	if err := runtime.Start(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "fake-cri:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "fake-cri: serving a fake CRI runtime on", *listen)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	runtime.Stop()
	return 0
}
