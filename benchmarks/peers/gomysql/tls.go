package main

// The replication TLS Secret, as the reference makes it (operator/mysql_operator/controller/children/tls.py):
// once, when the cache has none, never rewritten. A write the plane serves for the reference, so a peer
// without it would be measured doing less.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	maxReplicas  = 9 // api/v1.py's MAX_REPLICAS: every pod a certificate may have to name
	validityDays = 3650
)

// hosts: every name a server of the cluster may be reached by, as resources.Names.hosts lists them.
func (o owner) hosts() []string {
	short := []string{fmt.Sprintf("%s.%s.svc", o.primary(), o.Namespace)}
	for i := 0; i < maxReplicas; i++ {
		short = append(short, fmt.Sprintf("%s-%d.%s.%s.svc", o.statefulset(), i, o.headless(), o.Namespace))
	}
	all := append([]string{}, short...)
	for _, h := range short {
		all = append(all, h+".cluster.local")
	}
	return all
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 159))
}

func commonName(s string) pkix.Name {
	if len(s) > 64 {
		s = s[:64]
	}
	return pkix.Name{CommonName: s}
}

// issueTLS: a CA of the cluster's own (ECDSA P-256) signs one server certificate, then its key is dropped.
func issueTLS(o owner, now time.Time) (map[string][]byte, error) {
	start, end := now.Add(-5*time.Minute), now.AddDate(0, 0, validityDays)
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caSerial, err := serial()
	if err != nil {
		return nil, err
	}
	caName := commonName(o.Name + " replication CA")
	caTemplate := &x509.Certificate{
		SerialNumber: caSerial, Subject: caName, NotBefore: start, NotAfter: end,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	certSerial, err := serial()
	if err != nil {
		return nil, err
	}
	server := &x509.Certificate{
		SerialNumber: certSerial, Subject: commonName(o.Name + " database server"), NotBefore: start, NotAfter: end,
		DNSNames: o.hosts(), BasicConstraintsValid: true,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	certDER, err := x509.CreateCertificate(rand.Reader, server, caTemplate, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func tlsSecret(o owner, files map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: o.meta(o.tls(), true), Type: corev1.SecretTypeTLS, Data: files,
	}
}

// ensureTLS creates the TLS Secret when the cache (metadata only) has none: keys are made only then.
func (r *Reconciler) ensureTLS(ctx context.Context, o owner) error {
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := r.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.tls()}, live)
	if !apierrors.IsNotFound(err) {
		return err // nil: it exists
	}
	files, err := issueTLS(o, time.Now().UTC())
	if err != nil {
		return err
	}
	if err := r.Create(ctx, tlsSecret(o, files)); !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil // our earlier create, not yet in the cache
}
