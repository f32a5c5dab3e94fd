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
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
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
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	hollownode "k8s.io/kubernetes/cmd/kubemark/app"
	kubeletcertificate "k8s.io/kubernetes/pkg/kubelet/certificate"
	"k8s.io/kubernetes/pkg/kubelet/certificate/bootstrap"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
	"k8s.io/utils/clock"

	// kubectl's client auth plugins, as cmd/kubectl imports them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

// components maps a name to its entry point; each returns the process's exit code.
var components = map[string]func(args []string) int{
	"etcd":                    runEtcd,
	"kube-apiserver":          runAPIServer,
	"kube-controller-manager": runControllerManager,
	"hollow-node":             runHollowNode,
	"kubectl":                 runKubectl,
	"kubelet-identity":        runKubeletIdentity,
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if _, ok := components[name]; !ok {
		if len(args) == 0 {
			usage()
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	run, ok := components[name]
	if !ok {
		usage()
		os.Exit(2)
	}
	// Each upstream command reads os.Args itself (cobra, klog): show it its own.
	os.Args = append([]string{name}, args...)
	exitWithParent()
	os.Exit(run(args))
}

func usage() {
	names := make([]string, 0, len(components))
	for n := range components {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: kube COMPONENT [ARGS...]\ncomponents: %s\n", strings.Join(names, ", "))
}

// exitWithParent ends this component when the process that started it is gone. With
// BOOTLET_KUBE_PARENT=PID set (bootlet-testplane sets it for every component it starts), a
// parent that dies without stopping us (SIGKILL, a test binary that exits) leaves nothing
// behind: once we are re-parented we send ourselves SIGTERM (the component's own graceful
// stop), and exit after 15 s whatever it does.
func exitWithParent() {
	pid, err := strconv.Atoi(os.Getenv("BOOTLET_KUBE_PARENT"))
	if err != nil || pid <= 1 {
		return
	}
	go func() {
		for os.Getppid() == pid {
			time.Sleep(500 * time.Millisecond)
		}
		fmt.Fprintf(os.Stderr, "kube: parent %d is gone; stopping\n", pid)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(15 * time.Second)
		os.Exit(1)
	}()
}

func runAPIServer(_ []string) int {
	return cli.Run(apiserver.NewAPIServerCommand())
}

func runControllerManager(_ []string) int {
	return cli.Run(controllermanager.NewControllerManagerCommand())
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

// runKubectl is cmd/kubectl's main.
func runKubectl(_ []string) int {
	logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) // nolint:errcheck
	if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

// runEtcd starts one etcd member from go.etcd.io/etcd/server/v3/embed, the library the
// etcd binary itself is built on, with only the settings a single loopback member needs.
func runEtcd(args []string) int {
	fs := flag.NewFlagSet("etcd", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "data directory")
	client := fs.String("listen-client-urls", "http://127.0.0.1:2379", "client URL (loopback)")
	peer := fs.String("listen-peer-urls", "http://127.0.0.1:2380", "peer URL (loopback)")
	noFsync := fs.Bool("unsafe-no-fsync", false, "do not fsync (tests only)")
	quota := fs.Int64("quota-backend-bytes", 2<<30, "backend quota")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.UnsafeNoFsync = *noFsync
	cfg.QuotaBackendBytes = *quota
	cfg.LogLevel = "warn"
	cu, err := url.Parse(*client)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 2
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 2
	}
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	}
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd: ready on", cu.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		fmt.Fprintln(os.Stderr, "etcd: not ready after 60s")
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		e.Close()
		return 1
	case <-sig:
		e.Close()
		return 0
	}
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
