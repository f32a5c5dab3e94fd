// The core of the multi-call binary, shared by both pinned modules: testplane/kube (the
// newest supported release) has this file, testplane/kube-oldest (the oldest) links to it.
// It holds the dispatch (main) and the control plane bootlet's core real-cluster set needs —
// etcd, kube-apiserver and kube-controller-manager — so it must compile unchanged against
// every release the suite pins; the other components register themselves from init() in
// files of their own module (kubectl among them: cmd/kubectl's main differs between
// releases, see kubectl.go).

package main

import (
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
	"k8s.io/component-base/cli"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

// components maps a name to its entry point; each returns the process's exit code.
var components = map[string]func(args []string) int{
	"etcd":                    runEtcd,
	"kube-apiserver":          runAPIServer,
	"kube-controller-manager": runControllerManager,
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
