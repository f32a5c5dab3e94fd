package main

// kube-scheduler: cmd/kube-scheduler of the pinned release, unmodified.

import (
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // as cmd/kube-scheduler: JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func init() {
	components["kube-scheduler"] = runScheduler
}

// runScheduler is cmd/kube-scheduler's main.
func runScheduler(_ []string) int {
	return cli.Run(scheduler.NewSchedulerCommand())
}
