// Command gomysql is the reference MySQLCluster operator's reconciler ported to controller-runtime:
// the Go peer of benchmarks/bench_scale.py.
//
//	gomysql --kubeconfig K [--namespace NS] [--workers 2] [--health-addr 127.0.0.1:PORT] [--metrics-addr 127.0.0.1:PORT]
//	gomysql --print-children < cluster.json    (the children it would build, as JSON; for tests)
//
// Like the reference: one controller For(MySQLCluster) that Owns(StatefulSet, Service, CronJob),
// informers on our children only (label managed-by=mysql-operator), the Secrets and Pods cached as
// metadata only (pod 0 is labelled primary: roles.go), PVCs and Jobs read from the apiserver, no
// client-side rate limit.
// /readyz answers 200 once every informer has synced. --metrics-addr serves controller-runtime's own
// /metrics (the work queue's, which bench_scale.py reads as it reads the reference's); off by default.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func main() {
	namespace := flag.String("namespace", "", "watch only this namespace (default: all)")
	workers := flag.Int("workers", 2, "concurrent reconciles")
	health := flag.String("health-addr", "127.0.0.1:8081", "/healthz and /readyz address")
	metrics := flag.String("metrics-addr", "0", "/metrics address (0: none)")
	printChildren := flag.Bool("print-children", false, "print the children of the MySQLCluster JSON on stdin, and exit")
	flag.Parse() // --kubeconfig is controller-runtime's own flag
	if *printChildren {
		if err := writeChildren(os.Stdin, os.Stdout); err != nil {
			fail(err)
		}
		return
	}
	ctrl.SetLogger(funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{}))

	ours := klabels.SelectorFromSet(klabels.Set{managedBy: operatorName})
	secrets := &metav1.PartialObjectMetadata{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	pods := &metav1.PartialObjectMetadata{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	cached := []client.Object{newCluster(), &appsv1.StatefulSet{}, &corev1.Service{}, &batchv1.CronJob{}, secrets, pods}
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{}}
	for _, obj := range cached[1:] {
		// Only our children: a stranger of a child's name is found by the create's AlreadyExists.
		opts.ByObject[obj] = cache.ByObject{Label: ours}
	}
	if *namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{*namespace: {}}
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 clientgoscheme.Scheme,
		Cache:                  opts,
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: *metrics},
		HealthProbeBindAddress: *health,
	})
	if err != nil {
		fail(err)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("mysqlcluster").
		For(newCluster()).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&batchv1.CronJob{}).
		// Pod 0 appearing is when it is labelled primary; pods map to their cluster by label.
		Watches(pods, handler.EnqueueRequestsFromMapFunc(clusterOf)).
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(&Reconciler{Client: mgr.GetClient(), reader: mgr.GetAPIReader()})
	if err != nil {
		fail(err)
	}
	synced := func(req *http.Request) error {
		for _, obj := range cached {
			inf, err := mgr.GetCache().GetInformer(req.Context(), obj, cache.BlockUntilSynced(false))
			if err != nil {
				return err
			}
			if !inf.HasSynced() {
				return errors.New("informers not synced")
			}
		}
		return nil
	}
	if err := mgr.AddReadyzCheck("informers", synced); err != nil {
		fail(err)
	}
	if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
		fail(err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil && !errors.Is(err, context.Canceled) {
		fail(err)
	}
}

func clusterOf(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[instanceLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gomysql:", err)
	os.Exit(1)
}

// writeChildren prints what the reconciler would write for one cluster, keyed by the name of the
// reference's builder (mysql_operator.controller.children.resources) of each child: a unit test compares the two.
func writeChildren(in io.Reader, out io.Writer) error {
	c := newCluster()
	if err := json.NewDecoder(in).Decode(&c.Object); err != nil {
		return fmt.Errorf("cluster JSON on stdin: %w", err)
	}
	o, err := ownerOf(c)
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	sts, err := statefulSet(o)
	if err != nil {
		return err
	}
	pvc, err := backupPVC(o)
	if err != nil {
		return err
	}
	job, err := finalBackupJob(o)
	if err != nil {
		return err
	}
	files, err := issueTLS(o, time.Now().UTC())
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(map[string]any{
		"credentials_secret": credentialsSecret(o),
		"tls_secret":         tlsSecret(o, files),
		"headless_service":   headlessService(o),
		"primary_service":    primaryService(o),
		"statefulset":        sts,
		"backup_pvc":         pvc,
		"backup_cronjob":     backupCronJob(o),
		"final_backup_job":   job,
	})
}
