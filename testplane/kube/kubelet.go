package main

// kubelet: the kubelet of the pinned release as systemd starts it from kubelet.service with
// kubeadm's 10-kubeadm.conf drop-in (`kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS
// $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS`), minus the parts that need a container
// runtime and control of cgroups, which a test container has neither of.
//
// What is the kubelet's own code, unchanged (cmd/kubelet/app, pkg/kubelet):
//   - the command line: options.NewKubeletFlags, NewKubeletConfiguration,
//     AddKubeletConfigFlags and AddGlobalFlags, so every kubelet flag parses (and an unknown
//     one fails) as it does for the real binary; `--version` prints `Kubernetes v1.37.2`
//     (kubeadm's KubeletVersion preflight runs it);
//   - `--config`, loaded by pkg/kubelet/kubeletconfig/configfiles with the kubelet's
//     defaulting, then the command line re-applied over it (flag precedence, kubernetes#56171),
//     then validated by ValidateKubeletConfiguration;
//   - everything after: kubeletapp.Run, the function cmd/kubelet calls. So the client comes
//     from the kubelet's buildKubeletClientConfig: with rotateCertificates its client
//     certificate manager, and the TLS bootstrap from --bootstrap-kubeconfig when --kubeconfig
//     is missing or invalid (bootstrap.LoadClientConfig; bootstrap.LoadClientCert with
//     rotation off); without a usable --kubeconfig and no --bootstrap-kubeconfig it fails as
//     the kubelet does. The node name is --hostname-override lower-cased, else the host name
//     (nodeutil.GetHostname); the Node is registered with --register-with-taints and
//     --node-labels, its status posted every nodeStatusUpdateFrequency, its Lease renewed;
//     /healthz is served on healthzBindAddress:healthzPort (127.0.0.1:10248), the kubelet API
//     on address:port (10250) with its serving certificate (self-signed in --cert-dir, the
//     configured tlsCertFile/tlsPrivateKeyFile, or serverTLSBootstrap), authenticated and
//     authorized as configured; READY=1 goes to systemd's notify socket when there is one.
//     A kubeconfig naming certificate files is re-read as client-go re-reads them (every
//     transport.CertCallbackRefreshDuration for open connections; BOOTLET_CERT_RELOAD, a Go
//     duration, shortens it as for hollow-node).
//
// What is faked, as kubemark's hollow kubelet fakes it (pkg/kubemark.NewHollowKubelet,
// whose dependencies are taken from it), and why:
//   - the container runtime: a fake CRI server (k8s.io/cri-client/pkg/fake) served by this
//     process on a private unix socket under /tmp, which replaces containerRuntimeEndpoint and
//     imageServiceEndpoint (the configured ones are logged): there is no containerd or CRI-O
//     in the test container. It reports the runtime and network ready, so the Node goes Ready;
//     pods bound to the node "run" in the fake.
//   - cAdvisor (cadvisor/testing.Fake: fixed machine info and stats): it needs cgroup
//     filesystems and /dev/kmsg;
//   - the container manager (cm.NewStubContainerManager): it creates and enforces cgroups
//     (cgroupsPerQOS, node allocatable, swap), which needs cgroup control;
//   - the OS, mounter, host utilities, OOM adjuster, probe manager and event recorder (no
//     events are posted: the real recorder's OOM watcher reads /dev/kmsg), and kubemark's
//     volume plugins.
// Nothing here touches what bootlet works with: the kubeconfig and certificate files, the
// client, the Node, its Lease and the kubelet's ports.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/transport"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // as cmd/kubelet: JSON log format
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/component-base/version/verflag"
	nodeutil "k8s.io/component-helpers/node/util"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletconfigvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/configfiles"
	"k8s.io/kubernetes/pkg/kubemark"
	utilfs "k8s.io/kubernetes/pkg/util/filesystem"
)

func init() {
	components["kubelet"] = runKubelet
}

// runKubelet is cmd/kubelet's main with newKubeletCommand for app.NewKubeletCommand.
func runKubelet(_ []string) int {
	if v := os.Getenv("BOOTLET_CERT_RELOAD"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kubelet: BOOTLET_CERT_RELOAD:", err)
			return 2
		}
		transport.CertCallbackRefreshDuration = d
	}
	return cli.Run(newKubeletCommand())
}

// newKubeletCommand is cmd/kubelet/app.NewKubeletCommand up to the dependencies: the same
// flag sets, parse order, config file loading, precedence, validation and logging set-up;
// then runFakedKubelet instead of UnsecuredDependencies and Run. --config-dir (drop-in
// configuration) is not supported: kubeadm does not use it.
func newKubeletCommand() *cobra.Command {
	cleanFlagSet := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	cleanFlagSet.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	kubeletFlags := options.NewKubeletFlags()
	kubeletConfig, err := options.NewKubeletConfiguration()
	if err != nil {
		panic(err) // as upstream: a programmer error
	}
	cmd := &cobra.Command{
		Use:                "kubelet",
		Long:               "The kubelet of Kubernetes, with a fake container runtime, cAdvisor and container manager (bootlet's tests).",
		DisableFlagParsing: true,
		SilenceUsage:       true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cleanFlagSet.Parse(args); err != nil {
				return fmt.Errorf("failed to parse kubelet flag: %w", err)
			}
			if cmds := cleanFlagSet.Args(); len(cmds) > 0 {
				return fmt.Errorf("unknown command %+s", cmds[0])
			}
			if help, _ := cleanFlagSet.GetBool("help"); help {
				return cmd.Help()
			}
			verflag.PrintAndExitIfRequested()
			if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(kubeletConfig.FeatureGates); err != nil {
				return fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err)
			}
			if err := options.ValidateKubeletFlags(kubeletFlags); err != nil {
				return fmt.Errorf("failed to validate kubelet flags: %w", err)
			}
			if kubeletFlags.KubeletDropinConfigDirectory != "" {
				return errors.New("--config-dir: drop-in configuration is not supported by this kubelet")
			}
			if kubeletFlags.KubeletConfigFile != "" {
				kubeletConfig, err = loadKubeletConfigFile(kubeletFlags.KubeletConfigFile)
				if err != nil {
					return fmt.Errorf("failed to load kubelet config file, path: %s, error: %w", kubeletFlags.KubeletConfigFile, err)
				}
				if err := kubeletConfigFlagPrecedence(kubeletConfig, args); err != nil {
					return fmt.Errorf("failed to precedence kubeletConfigFlag: %w", err)
				}
				if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(kubeletConfig.FeatureGates); err != nil {
					return fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err)
				}
			}
			logs.InitLogs()
			if err := logsapi.ValidateAndApplyAsField(&kubeletConfig.Logging, utilfeature.DefaultFeatureGate, field.NewPath("logging")); err != nil {
				return fmt.Errorf("initialize logging: %v", err)
			}
			cliflag.PrintFlags(cleanFlagSet)
			if err := kubeletconfigvalidation.ValidateKubeletConfiguration(kubeletConfig, utilfeature.DefaultFeatureGate); err != nil {
				return fmt.Errorf("failed to validate kubelet configuration, error: %w, path: %s", err, kubeletConfig)
			}
			return runFakedKubelet(&options.KubeletServer{
				KubeletFlags:         *kubeletFlags,
				KubeletConfiguration: *kubeletConfig,
			})
		},
	}
	kubeletFlags.AddFlags(cleanFlagSet)
	options.AddKubeletConfigFlags(cleanFlagSet, kubeletConfig)
	options.AddGlobalFlags(cleanFlagSet)
	cleanFlagSet.BoolP("help", "h", false, "help for kubelet")
	const usageFmt = "Usage:\n  %s\n\nFlags:\n%s"
	cmd.SetUsageFunc(func(cmd *cobra.Command) error {
		fmt.Fprintf(cmd.OutOrStderr(), usageFmt, cmd.UseLine(), cleanFlagSet.FlagUsagesWrapped(2))
		return nil
	})
	cmd.SetHelpFunc(func(cmd *cobra.Command, _ []string) {
		fmt.Fprintf(cmd.OutOrStdout(), "%s\n\n"+usageFmt, cmd.Long, cmd.UseLine(), cleanFlagSet.FlagUsagesWrapped(2))
	})
	return cmd
}

// runFakedKubelet is the kubelet's UnsecuredDependencies with kubemark's fakes in place of
// the runtime, cAdvisor, container manager and host access, then the kubelet's Run.
func runFakedKubelet(s *options.KubeletServer) error {
	ctx := genericapiserver.SetupSignalContext()
	deps, err := kubeletapp.UnsecuredDependencies(ctx, s, utilfeature.DefaultFeatureGate)
	if err != nil {
		return fmt.Errorf("failed to construct kubelet dependencies: %w", err)
	}
	endpoint, err := fakeremote.GenerateEndpoint()
	if err != nil {
		return fmt.Errorf("fake container runtime: %w", err)
	}
	runtime := fakeremote.NewFakeRemoteRuntime()
	if err := runtime.Start(endpoint); err != nil {
		return fmt.Errorf("fake container runtime: %w", err)
	}
	defer runtime.Stop()
	klog.InfoS("Container runtime faked (no CRI in this test kubelet)",
		"configuredEndpoint", s.ContainerRuntimeEndpoint, "fakeEndpoint", endpoint)
	s.ContainerRuntimeEndpoint = endpoint
	s.ImageServiceEndpoint = endpoint

	host, err := nodeutil.GetHostname(s.HostnameOverride)
	if err != nil {
		return err
	}
	fakes := kubemark.NewHollowKubelet(&s.KubeletFlags, &s.KubeletConfiguration, nil, nil,
		&cadvisortest.Fake{NodeName: host}, nil, nil, cm.NewStubContainerManager()).KubeletDeps
	deps.CAdvisorInterface = fakes.CAdvisorInterface
	deps.ContainerManager = fakes.ContainerManager
	deps.ProbeManager = fakes.ProbeManager
	deps.OSInterface = fakes.OSInterface
	deps.VolumePlugins = fakes.VolumePlugins
	deps.DynamicPluginProber = nil
	deps.OOMAdjuster = fakes.OOMAdjuster
	deps.Mounter = fakes.Mounter
	deps.Subpather = fakes.Subpather
	deps.HostUtil = fakes.HostUtil
	deps.Recorder = fakes.Recorder

	utilfeature.DefaultMutableFeatureGate.AddMetrics()
	return kubeletapp.Run(ctx, s, deps, utilfeature.DefaultFeatureGate)
}

// loadKubeletConfigFile is cmd/kubelet/app.loadConfigFile.
func loadKubeletConfigFile(name string) (*kubeletconfiginternal.KubeletConfiguration, error) {
	const errFmt = "failed to load Kubelet config file %s, error %v"
	path, err := filepath.Abs(name)
	if err != nil {
		return nil, fmt.Errorf(errFmt, name, err)
	}
	loader, err := configfiles.NewFsLoader(&utilfs.DefaultFs{}, path)
	if err != nil {
		return nil, fmt.Errorf(errFmt, name, err)
	}
	kc, err := loader.Load(context.TODO())
	if err != nil {
		return nil, fmt.Errorf(errFmt, name, err)
	}
	if kc.EvictionHard == nil {
		kc.EvictionHard = eviction.DefaultEvictionHard
	} else if kc.MergeDefaultEvictionSettings {
		for k, v := range eviction.DefaultEvictionHard {
			if _, exists := kc.EvictionHard[k]; !exists {
				kc.EvictionHard[k] = v
			}
		}
	}
	return kc, nil
}

// kubeletConfigFlagPrecedence is cmd/kubelet/app.kubeletConfigFlagPrecedence: the command
// line parsed again over the configuration from the file, so that flags win.
func kubeletConfigFlagPrecedence(kc *kubeletconfiginternal.KubeletConfiguration, args []string) error {
	globals := pflag.NewFlagSet("", pflag.ExitOnError)
	globals.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	options.AddGlobalFlags(globals)
	fs := pflag.NewFlagSet("", pflag.ExitOnError)
	fs.SetNormalizeFunc(globals.GetNormalizeFunc())
	globals.VisitAll(func(f *pflag.Flag) {
		fs.VarP(cliflag.NoOp{}, f.Name, f.Shorthand, f.Usage)
	})
	options.NewKubeletFlags().AddFlags(fs)
	options.AddKubeletConfigFlags(fs, kc)
	original := kc.FeatureGates
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return err
	}
	for k, v := range original {
		if _, ok := kc.FeatureGates[k]; !ok {
			kc.FeatureGates[k] = v
		}
	}
	return nil
}
