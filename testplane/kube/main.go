// Command kube is bootlet's test control plane made of the real Kubernetes components,
// built from k8s.io/kubernetes as an ordinary module dependency. One binary, one
// component per process (the hyperkube model): the first argument names the component.
//
//	kube etcd --data-dir DIR --listen-client-urls URL
//	kube kube-apiserver FLAGS...
//	kube kube-controller-manager FLAGS...
//	kube hollow-node FLAGS...          (kubemark's hollow kubelet)
//	kube kubectl ARGS...
//	kube kubelet-identity FLAGS...     (the kubelet's identity code alone: see runKubeletIdentity)
//	kube kube-scheduler FLAGS...       (scheduler.go)
//	kube kubeadm ARGS...               (kubeadm.go)
//	kube kubelet FLAGS...              (the kubelet, its runtime faked: see kubelet.go)
//	kube fake-cri --listen ENDPOINT    (that fake runtime alone: see cri.go)
//	kube etcdutl snapshot save|restore (etcdsnap.go)
//
// Each component also runs through a link named after it (kubelet, kubeadm, ...): the
// name the binary was run as picks it first. Nothing here changes what the components do;
// it only chooses which one runs (and, for the hollow kubelet, how often client-go re-reads
// rotated certificate files: see runHollowNode). The exception is the kubelet, whose
// container runtime, cAdvisor and container manager kubelet.go replaces with kubemark's
// fakes, and says why.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	clientset "k8s.io/client-go/kubernetes"
	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/client-go/util/certificate"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	hollownode "k8s.io/kubernetes/cmd/kubemark/app"
	kubeletcertificate "k8s.io/kubernetes/pkg/kubelet/certificate"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
	"k8s.io/utils/clock"

	// kubectl's client auth plugins, as cmd/kubectl imports them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

// The components beside core.go's (main and the core set live there, shared with
// testplane/kube-oldest).
func init() {
	components["hollow-node"] = runHollowNode
	components["kubectl"] = runKubectl
	components["kubelet-identity"] = runKubeletIdentity
}

// runHollowNode is cmd/kubemark's main. BOOTLET_CERT_RELOAD (a Go duration) shortens how
// often client-go re-reads a kubeconfig's client-certificate files for connections already
// open (transport.CertCallbackRefreshDuration, 5 minutes; "exposed so that integration
// tests can crank up the reload speed"): the tests rotate certificates of minutes, not of
// months. New connections read the files at every handshake either way.
func runHollowNode(_ []string) int {
	if v := os.Getenv("BOOTLET_CERT_RELOAD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "hollow-node: BOOTLET_CERT_RELOAD:", err)
			return 2
		}
		transport.CertCallbackRefreshDuration = d
	}
	return cli.Run(hollownode.NewHollowNodeCommand())
}

// runKubectl is cmd/kubectl's main at this release: klog's verbosity set from the command
// line before the command is built (plugins and .kuberc are read then).
func runKubectl(_ []string) int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

// runKubeletIdentity is the kubelet minus everything that is not node identity: bootlet's
// job done by the kubelet's own code at this release, as cmd/kubelet/app wires it with
// rotateCertificates on. The TLS bootstrap and the kubeconfig pointing at the cert store
// (bootstrap.LoadClientConfig), the client certificate manager (rotation at 70-90 % of the
// lifetime) behind a rotating transport (certificate.UpdateTransport), and the node Lease
// controller (10 s, the kubelet's owner-reference function) on a heartbeat client without
// rate limit and with the kubelet's timeout; protobuf, QPS 50, burst 100, as the kubelet's
// defaults. The flags are bootlet run's where they overlap; bootlet-only ones are accepted
// and ignored so that one command line runs either.
func runKubeletIdentity(args []string) int {
	fs := flag.NewFlagSet("kubelet-identity", flag.ContinueOnError)
	bootstrapPath := fs.String("bootstrap-kubeconfig", "/etc/kubernetes/bootstrap-kubelet.conf", "bootstrap kubeconfig")
	kubeconfig := fs.String("kubeconfig", "/etc/kubernetes/kubelet.conf", "kubeconfig to write and use")
	certDir := fs.String("cert-dir", "/var/lib/kubelet/pki", "certificate directory")
	nodeName := fs.String("node-name", "", "node name")
	leaseDuration := fs.Duration("lease-duration", 40*time.Second, "spec.leaseDurationSeconds")
	renewInterval := fs.Duration("lease-renew-interval", 0, "Lease renewal period (default: a quarter of --lease-duration, as the kubelet)")
	for _, ignored := range []string{"metrics-bind-address", "rotation-fraction", "rotation-jitter", "csr-timeout", "config"} {
		fs.String(ignored, "", "accepted and ignored (bootlet run only)")
	}
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *nodeName == "" {
		host, _ := os.Hostname()
		*nodeName = strings.ToLower(host)
	}
	if *renewInterval == 0 {
		*renewInterval = time.Duration(float64(*leaseDuration) * 0.25)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	logger := klog.FromContext(ctx)
	node := types.NodeName(*nodeName)

	// cmd/kubelet/app.buildKubeletClientConfig, the RotateCertificates branch.
	certConfig, clientConfig, err := bootstrap.LoadClientConfig(logger, *kubeconfig, *bootstrapPath, *certDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-identity:", err)
		return 1
	}
	contentType(certConfig)
	contentType(clientConfig)
	clientConfig.QPS, clientConfig.Burst = 50, 100
	newClientset := func(current *tls.Certificate) (clientset.Interface, error) {
		config := certConfig
		if current != nil {
			config = clientConfig
		}
		return clientset.NewForConfig(config)
	}
	manager, err := kubeletcertificate.NewKubeletClientCertificateManager(*certDir, node,
		clientConfig.CertData, clientConfig.KeyData, clientConfig.CertFile, clientConfig.KeyFile, newClientset)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-identity:", err)
		return 1
	}
	transportConfig := restclient.AnonymousClientConfig(clientConfig)
	if _, err := kubeletcertificate.UpdateTransport(logger, wait.NeverStop, transportConfig, manager, 5*time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-identity:", err)
		return 1
	}
	manager.Start()
	defer manager.Stop()
	if err := waitForCertificate(ctx, manager); err != nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "kubelet-identity: client certificate in place")

	// cmd/kubelet/app.RunKubelet's heartbeat client and pkg/kubelet's Lease controller.
	heartbeat := *transportConfig
	heartbeat.Timeout = 10 * time.Second // NodeStatusUpdateFrequency, below the lease duration
	heartbeat.QPS = -1
	client, err := clientset.NewForConfig(&heartbeat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubelet-identity:", err)
		return 1
	}
	onFailure := func() { utilnet.CloseIdleConnectionsFor(heartbeat.Transport) }
	controller := lease.NewController(clock.RealClock{}, client, *nodeName, int32(leaseDuration.Seconds()),
		onFailure, *renewInterval, *nodeName, v1.NamespaceNodeLease,
		kubeletutil.SetNodeOwnerFunc(ctx, client, *nodeName))
	controller.Run(ctx)
	return 0
}

// contentType is cmd/kubelet/app.setContentTypeForClient with the kubelet's default.
func contentType(cfg *restclient.Config) {
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = strings.Join([]string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON}, ",")
}

// waitForCertificate returns once the manager holds a certificate (or ctx ends).
func waitForCertificate(ctx context.Context, m certificate.Manager) error {
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return m.Current() != nil, nil
	})
}
