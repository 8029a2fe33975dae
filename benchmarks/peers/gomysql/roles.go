package main

// Pod 0's primary label, as the reference's roles.py gives it to a new cluster's first primary: once the
// pod exists. The label puts pod 0 behind the primary Service, so kube-controller-manager writes that
// Service's Endpoints and EndpointSlice too: writes the plane serves for the reference, so a peer
// without them would be measured doing less. (The reference also labels other pods replica; the
// benchmark's clusters have one replica.)

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// labelFirstPrimary labels pod 0 primary once it exists (the cache holds its metadata only): the
// primary Service selects it from then on.
func (r *Reconciler) labelFirstPrimary(ctx context.Context, o owner) error {
	pod := &metav1.PartialObjectMetadata{}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	err := r.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.primaryPod()}, pod)
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if pod.DeletionTimestamp != nil || pod.Labels[roleLabel] == "primary" {
		return nil
	}
	if ref := metav1.GetControllerOf(pod); ref == nil || ref.Kind != "StatefulSet" || ref.Name != o.statefulset() {
		return nil // not our StatefulSet's pod
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"primary"}}}`, roleLabel)
	return r.Patch(ctx, pod, client.RawPatch(types.MergePatchType, []byte(patch)))
}
