package main

// kubectl: cmd/kubectl's main at this release, which sets no klog verbosity before the
// command is built (that came later, with .kuberc: testplane/kube's main.go does it).

import (
	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"

	// kubectl's client auth plugins, as cmd/kubectl imports them.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func init() {
	components["kubectl"] = runKubectl
}

// runKubectl is cmd/kubectl's main.
func runKubectl(_ []string) int {
	if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}
