// etcdutl: etcd's own snapshot and restore, for the disaster-recovery scenario (kubeadm's
// documented etcd restore): a snapshot taken while the cluster runs, the control plane
// stopped, the snapshot restored into a fresh data directory, etcd started on it.
//
//	kube etcdutl snapshot save --endpoints URL FILE      (etcdctl's save: go.etcd.io/etcd/client/v3/snapshot)
//	kube etcdutl snapshot restore --data-dir DIR [--name default] \
//	    [--initial-cluster default=PEER_URL] [--initial-advertise-peer-urls PEER_URL] FILE
//	    (etcdutl's restore: go.etcd.io/etcd/etcdutl/v3/snapshot)
//
// The file may come before or after the flags. Registered in `components` from init(), so
// main.go stays as it is.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	utlsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

func init() {
	components["etcdutl"] = runEtcdutl
}

func runEtcdutl(args []string) int {
	if len(args) < 2 || args[0] != "snapshot" {
		fmt.Fprintln(os.Stderr, "usage: etcdutl snapshot save|restore [flags] FILE")
		return 2
	}
	switch args[1] {
	case "save":
		return snapshotSave(args[2:])
	case "restore":
		return snapshotRestore(args[2:])
	default:
		fmt.Fprintf(os.Stderr, "etcdutl: unknown snapshot command %q (save, restore)\n", args[1])
		return 2
	}
}

// parseWithFile parses fs from args with one positional FILE before or after the flags.
func parseWithFile(fs *flag.FlagSet, args []string) (string, bool) {
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if fs.NArg() == 0 {
		fmt.Fprintf(os.Stderr, "%s: a snapshot FILE is required\n", fs.Name())
		return "", false
	}
	file := fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return "", false
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "%s: unexpected arguments %v\n", fs.Name(), fs.Args())
		return "", false
	}
	return file, true
}

func snapshotSave(args []string) int {
	fs := flag.NewFlagSet("etcdutl snapshot save", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "http://127.0.0.1:2379", "comma-separated client URLs")
	file, ok := parseWithFile(fs, args)
	if !ok {
		return 2
	}
	lg, err := zap.NewProduction()
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdutl:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := clientv3.Config{
		Endpoints:   strings.Split(*endpoints, ","),
		DialTimeout: 10 * time.Second,
	}
	version, err := clientsnapshot.SaveWithVersion(ctx, lg, cfg, file)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdutl: snapshot save:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "etcdutl: snapshot saved to %s (etcd %s)\n", file, version)
	return 0
}

func snapshotRestore(args []string) int {
	fs := flag.NewFlagSet("etcdutl snapshot restore", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "the new data directory (must not exist)")
	name := fs.String("name", "default", "the member's name")
	cluster := fs.String("initial-cluster", "", "NAME=PEER_URL (default: NAME=the advertised peer URL)")
	peer := fs.String("initial-advertise-peer-urls", "http://127.0.0.1:2380", "the member's peer URL")
	token := fs.String("initial-cluster-token", "etcd-cluster", "the cluster token")
	bump := fs.Uint64("bump-revision", 0, "raise the revision by this much after the restore")
	compacted := fs.Bool("mark-compacted", false, "mark the restored revision compacted")
	file, ok := parseWithFile(fs, args)
	if !ok {
		return 2
	}
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcdutl snapshot restore: --data-dir is required")
		return 2
	}
	if *cluster == "" {
		*cluster = *name + "=" + *peer
	}
	lg, err := zap.NewProduction()
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdutl:", err)
		return 1
	}
	err = utlsnapshot.NewV3(lg).Restore(utlsnapshot.RestoreConfig{
		SnapshotPath:        file,
		Name:                *name,
		OutputDataDir:       *dataDir,
		PeerURLs:            []string{*peer},
		InitialCluster:      *cluster,
		InitialClusterToken: *token,
		RevisionBump:        *bump,
		MarkCompacted:       *compacted,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdutl: snapshot restore:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "etcdutl: restored %s into %s\n", file, *dataDir)
	return 0
}
