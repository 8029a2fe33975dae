// Command crenvtest starts controller-runtime's envtest (etcd + kube-apiserver + CRDs) once and
// prints how long Start() took as JSON: the peer of benchmarks/bench_start.py.
//
// Ready means what it means for the Python harness: /readyz ok, every CRD Established and served by
// discovery (envtest's CRD install waits for both before Start returns).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	assets := flag.String("assets", "", "directory holding etcd and kube-apiserver")
	crds := flag.String("crds", "", "directory of CRD manifests")
	flag.Parse()

	env := &envtest.Environment{
		BinaryAssetsDirectory: *assets,
		CRDDirectoryPaths:     []string{*crds},
		ErrorIfCRDPathMissing: true,
	}
	began := time.Now()
	cfg, err := env.Start()
	if err == nil {
		// envtest's own health check is /healthz; hold it to the same bar as the Python side.
		err = waitReadyz(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		_ = env.Stop()
		os.Exit(1)
	}
	started := time.Since(began)
	began = time.Now()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]float64{
		"start_seconds": started.Seconds(),
		"stop_seconds":  time.Since(began).Seconds(),
	})
}

func waitReadyz(cfg *rest.Config) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
