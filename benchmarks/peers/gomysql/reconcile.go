package main

// The reference reconciler (operator/mysql_operator/controller/reconciler.py, finalizer.py), compact: read from
// the caches, write each thing at most once per pass, never retry inside (an error requeues with
// backoff, a 409 included), and write nothing for a converged cluster.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

const (
	appliedNote = group + "/applied-config"
	pollEvery   = 5 * time.Second // a running final backup or stopping pods: nothing watches them
)

var clusterGVK = schema.GroupVersionKind{Group: group, Version: version, Kind: kind}

func newCluster() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(clusterGVK)
	return u
}

type Reconciler struct {
	client.Client               // reads from the caches
	reader        client.Reader // straight to the apiserver: kinds we keep no cache of, fresh reads
}

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	c := newCluster()
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	o, specErr := ownerOf(c)
	if c.GetDeletionTimestamp() != nil {
		return r.finalize(ctx, c, o)
	}
	// Before anything else: from here on, deleting the cluster waits for its final backup.
	if !controllerutil.ContainsFinalizer(c, finalizer) {
		before := c.DeepCopy()
		controllerutil.AddFinalizer(c, finalizer)
		if err := r.Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, err
		}
	}
	if specErr != nil {
		return ctrl.Result{}, r.writeStatus(ctx, c, clusterStatus(c, nil, "InvalidSpec", specErr.Error()))
	}
	sts, err := r.ensureChildren(ctx, o)
	if err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.writeStatus(ctx, c, clusterStatus(c, sts, "", ""))
}

func ownerOf(c *unstructured.Unstructured) (owner, error) {
	o := owner{Name: c.GetName(), Namespace: c.GetNamespace(), UID: string(c.GetUID())}
	raw, _, _ := unstructured.NestedMap(c.Object, "spec")
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &o.Spec)
	o.Spec.defaults()
	return o, err
}

func (r *Reconciler) ensureChildren(ctx context.Context, o owner) (*appsv1.StatefulSet, error) {
	if err := r.ensureSecret(ctx, o); err != nil {
		return nil, err
	}
	if err := r.ensureTLS(ctx, o); err != nil {
		return nil, err
	}
	for _, svc := range []*corev1.Service{headlessService(o), primaryService(o)} {
		if _, err := r.ensure(ctx, o, svc, &corev1.Service{}); err != nil {
			return nil, err
		}
	}
	want, err := statefulSet(o)
	if err != nil {
		return nil, err
	}
	live, err := r.ensure(ctx, o, want, &appsv1.StatefulSet{})
	if err != nil {
		return nil, err
	}
	if err := r.labelFirstPrimary(ctx, o); err != nil {
		return nil, err
	}
	if o.Spec.Backup.Enabled {
		pvc, err := backupPVC(o)
		if err != nil {
			return nil, err
		}
		if err := r.createOnce(ctx, pvc, &corev1.PersistentVolumeClaim{}); err != nil {
			return nil, err
		}
		if _, err := r.ensure(ctx, o, backupCronJob(o), &batchv1.CronJob{}); err != nil {
			return nil, err
		}
	} else if err := r.removeCronJob(ctx, o); err != nil {
		return nil, err
	}
	return live.(*appsv1.StatefulSet), nil
}

// ensureSecret creates the credentials Secret once; only its metadata is cached (never its data).
func (r *Reconciler) ensureSecret(ctx context.Context, o owner) error {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.secret()}, live)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, credentialsSecret(o)); !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil // our earlier create, not yet in the cache
	}
	if err != nil {
		return err
	}
	if live.Annotations[retained] != "true" || live.Labels[instanceLabel] != o.Name {
		// Never start pods on a Secret that is not ours: its author would know the root password.
		return fmt.Errorf("Secret %s exists and is not ours", o.secret())
	}
	return nil
}

// ensure creates want, or applies it (server-side, our field manager) when the config we last
// wrote, hashed into an annotation, differs: a converged child costs no request. Returns the
// object as the apiserver (or the cache) last showed it.
func (r *Reconciler) ensure(ctx context.Context, o owner, want, live client.Object) (client.Object, error) {
	hash := configHash(want)
	want.SetAnnotations(map[string]string{appliedNote: hash})
	key := client.ObjectKeyFromObject(want)
	err := r.Get(ctx, key, live)
	if apierrors.IsNotFound(err) {
		if err = r.Create(ctx, want); !apierrors.IsAlreadyExists(err) {
			return want, err
		}
		err = r.reader.Get(ctx, key, live) // created by us before; the cache lags
	}
	if err != nil {
		return nil, err
	}
	if ref := metav1.GetControllerOf(live); ref == nil || string(ref.UID) != o.UID {
		kind := want.GetObjectKind().GroupVersionKind().Kind
		return nil, fmt.Errorf("%s %s exists and is not controlled by cluster %s", kind, key.Name, o.Name)
	}
	if live.GetAnnotations()[appliedNote] == hash {
		return live, nil
	}
	err = r.Patch(ctx, want, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership) //nolint:staticcheck
	return want, err
}

// createOnce: kinds we never rewrite (the backup PVC, the final-backup Job). Not cached: read fresh.
func (r *Reconciler) createOnce(ctx context.Context, want, live client.Object) error {
	err := r.reader.Get(ctx, client.ObjectKeyFromObject(want), live)
	if apierrors.IsNotFound(err) {
		if err = r.Create(ctx, want); apierrors.IsAlreadyExists(err) {
			return nil
		}
	}
	return err
}

func (r *Reconciler) removeCronJob(ctx context.Context, o owner) error {
	live := &batchv1.CronJob{}
	err := r.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.backup()}, live)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if ref := metav1.GetControllerOf(live); ref == nil || string(ref.UID) != o.UID {
		return nil // not ours to delete
	}
	return client.IgnoreNotFound(r.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground)))
}

func configHash(obj any) string {
	body, _ := json.Marshal(obj)
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])[:20]
}

// -- status --------------------------------------------------------------------------------------

func converged(c *unstructured.Unstructured, sts *appsv1.StatefulSet) bool {
	replicas, _, _ := unstructured.NestedInt64(c.Object, "spec", "replicas")
	if sts == nil || sts.Generation == 0 {
		return false
	}
	s := sts.Status
	return s.ObservedGeneration == sts.Generation && int64(s.UpdatedReplicas) == replicas &&
		int64(s.ReadyReplicas) == replicas
}

// clusterStatus is the status the cluster should have: int64 numbers, as unstructured holds them.
func clusterStatus(c *unstructured.Unstructured, sts *appsv1.StatefulSet, reason, message string) map[string]any {
	ready := int64(0)
	if sts != nil {
		ready = int64(sts.Status.ReadyReplicas)
	}
	phase, cond := "Pending", [3]string{"False", "ReplicasNotReady", fmt.Sprintf("%d replicas ready", ready)}
	switch {
	case c.GetDeletionTimestamp() != nil:
		phase, cond = "Terminating", [3]string{"False", "Terminating", "the cluster is being deleted"}
	case reason != "":
		phase, cond = "Failed", [3]string{"False", reason, message}
	case converged(c, sts):
		phase, cond = "Running", [3]string{"True", "AllReplicasReady", fmt.Sprintf("%d replicas ready", ready)}
	}
	since := time.Now().UTC().Format(time.RFC3339)
	old, _, _ := unstructured.NestedSlice(c.Object, "status", "conditions")
	for _, item := range old {
		// metav1 semantics: the transition time moves only when the status flips.
		if m, ok := item.(map[string]any); ok && m["type"] == "Ready" && m["status"] == cond[0] {
			since, _ = m["lastTransitionTime"].(string)
		}
	}
	return map[string]any{
		"phase":              phase,
		"readyReplicas":      ready,
		"primaryEndpoint":    fmt.Sprintf("%s-primary.%s.svc:%d", c.GetName(), c.GetNamespace(), mysqlPort),
		"observedGeneration": c.GetGeneration(),
		"conditions": []any{map[string]any{
			"type": "Ready", "status": cond[0], "reason": cond[1], "message": cond[2],
			"observedGeneration": c.GetGeneration(), "lastTransitionTime": since,
		}},
	}
}

// writeStatus merge-patches /status when its meaning changed (the recorded final backup is kept).
func (r *Reconciler) writeStatus(ctx context.Context, c *unstructured.Unstructured, status map[string]any) error {
	old, _, _ := unstructured.NestedMap(c.Object, "status")
	if _, set := status["finalBackup"]; !set && old["finalBackup"] != nil {
		status["finalBackup"] = old["finalBackup"]
	}
	a, _ := json.Marshal(old)
	b, _ := json.Marshal(status)
	if string(a) == string(b) {
		return nil
	}
	before := c.DeepCopy()
	c.Object["status"] = status
	return r.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// -- deletion: stop the database, archive its volume, record the outcome, then let go ------------

type step struct {
	record map[string]any
	result *ctrl.Result // nil: done, the finalizer may come off
	then   func() error // once the record is stored
}

func (r *Reconciler) finalize(ctx context.Context, c *unstructured.Unstructured, o owner) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(c, finalizer) {
		return ctrl.Result{}, nil
	}
	record, _, _ := unstructured.NestedMap(c.Object, "status", "finalBackup")
	if record == nil {
		record = map[string]any{}
	}
	if wantsFinalBackup(c) && record["phase"] != "Succeeded" && record["phase"] != "Skipped" {
		s, err := r.finalBackup(ctx, c, o, record)
		if err != nil {
			return ctrl.Result{}, err
		}
		sts := &appsv1.StatefulSet{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.statefulset()}, sts); err != nil {
			sts = nil
		}
		status := clusterStatus(c, sts, "", "")
		status["finalBackup"] = s.record
		if err := r.writeStatus(ctx, c, status); err != nil {
			return ctrl.Result{}, err
		}
		if s.then != nil {
			if err := s.then(); err != nil {
				return ctrl.Result{}, err
			}
		}
		if s.result != nil {
			return *s.result, nil
		}
	}
	// A merge patch of the shortened list, conditional on the resourceVersion we read.
	before := c.DeepCopy()
	controllerutil.RemoveFinalizer(c, finalizer)
	err := r.Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

func wantsFinalBackup(c *unstructured.Unstructured) bool {
	enabled, _, _ := unstructured.NestedBool(c.Object, "spec", "backup", "enabled")
	return enabled && c.GetAnnotations()[skipFinal] != "true"
}

func with(record map[string]any, phase, message string) map[string]any {
	out := map[string]any{}
	for k, v := range record {
		out[k] = v
	}
	out["phase"], out["message"] = phase, message
	return out
}

func (r *Reconciler) finalBackup(ctx context.Context, c *unstructured.Unstructured, o owner, record map[string]any) (step, error) {
	poll := &ctrl.Result{RequeueAfter: pollEvery}
	at := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: o.Namespace, Name: name} }
	if err := r.reader.Get(ctx, at(o.primaryDataPVC()), &corev1.PersistentVolumeClaim{}); apierrors.IsNotFound(err) {
		// No pod ever got a volume: nothing to save, and a Job would wait forever.
		return step{record: with(record, "Skipped", "no data volume")}, nil
	} else if err != nil {
		return step{}, err
	}
	orphaning := slices.Contains(c.GetFinalizers(), "orphan")
	sts := &appsv1.StatefulSet{}
	stsErr := r.Get(ctx, at(o.statefulset()), sts)
	if client.IgnoreNotFound(stsErr) != nil {
		return step{}, stsErr
	}
	found := stsErr == nil
	ref := metav1.GetControllerOf(sts)
	ours := found && ref != nil && string(ref.UID) == o.UID
	if ours && !orphaning && (sts.Spec.Replicas == nil || *sts.Spec.Replicas != 0) {
		before := sts.DeepCopy()
		sts.Spec.Replicas = ptr.To(int32(0))
		if err := r.Patch(ctx, sts, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return step{}, err
		}
		msg := fmt.Sprintf("scaled StatefulSet %s to 0 for a consistent final backup", o.statefulset())
		return step{record: with(record, "Stopping", msg), result: poll}, nil
	}
	pods := &corev1.PodList{}
	if err := r.reader.List(ctx, pods, client.InNamespace(o.Namespace), client.MatchingLabels(podLabels(o.Name, "database"))); err != nil {
		return step{}, err
	}
	if len(pods.Items) > 0 {
		if found && (!ours || orphaning) {
			// Orphaned: mysqld keeps running on the volume, and the data is not going away.
			msg := fmt.Sprintf("final backup skipped: StatefulSet %s was orphaned and keeps running on the data volume", o.statefulset())
			return step{record: with(record, "Skipped", msg)}, nil
		}
		msg := fmt.Sprintf("waiting for %d database pod(s) to stop before the final backup", len(pods.Items))
		return step{record: with(record, "Stopping", msg), result: poll}, nil
	}
	pvc, err := backupPVC(o)
	if err != nil {
		return step{}, err
	}
	if err := r.createOnce(ctx, pvc, &corev1.PersistentVolumeClaim{}); err != nil {
		return step{}, err
	}
	job := &batchv1.Job{}
	err = r.reader.Get(ctx, at(o.finalJob()), job)
	if apierrors.IsNotFound(err) {
		want, err := finalBackupJob(o)
		if err != nil {
			return step{}, err
		}
		if err := r.Create(ctx, want); client.IgnoreAlreadyExists(err) != nil {
			return step{}, err
		}
		return step{record: with(record, "Running", fmt.Sprintf("Job %s running", o.finalJob())), result: poll}, nil
	}
	if err != nil {
		return step{}, err
	}
	background := client.PropagationPolicy(metav1.DeletePropagationBackground)
	if job.Annotations[clusterUIDNote] != o.UID || job.DeletionTimestamp != nil {
		// A leftover of an earlier cluster of this name (kept for its TTL): says nothing about us.
		return step{record: record, result: poll, then: func() error {
			return client.IgnoreNotFound(r.Delete(ctx, job, background))
		}}, nil
	}
	switch jobState(job) {
	case "succeeded":
		// Recorded before the finalizer comes off; the Job stays for its TTL.
		return step{record: with(record, "Succeeded", fmt.Sprintf("Job %s succeeded", o.finalJob()))}, nil
	case "failed":
		attempts, _ := record["attempts"].(int64)
		if record["lastFailedJob"] != string(job.UID) {
			attempts++
		}
		failed := with(record, "Failed", fmt.Sprintf("final backup Job %s failed; attempt %d", o.finalJob(), attempts))
		failed["attempts"], failed["lastFailedJob"] = attempts, string(job.UID)
		failed["lastFailureTime"] = time.Now().UTC().Format(time.RFC3339)
		wait := min(10*time.Second<<min(attempts-1, 6), 600*time.Second)
		// Deleted only once the failure is counted, so it is never counted twice.
		return step{record: failed, result: &ctrl.Result{RequeueAfter: wait}, then: func() error {
			return client.IgnoreNotFound(r.Delete(ctx, job, background))
		}}, nil
	}
	return step{record: with(record, "Running", fmt.Sprintf("Job %s running", o.finalJob())), result: poll}, nil
}

func jobState(job *batchv1.Job) string {
	if job.Status.Succeeded > 0 {
		return "succeeded"
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet:
			return "succeeded"
		case batchv1.JobFailed, batchv1.JobFailureTarget:
			return "failed"
		}
	}
	if job.Status.Failed > 0 { // backoffLimit 0: one failed pod fails the Job
		return "failed"
	}
	return "running"
}
