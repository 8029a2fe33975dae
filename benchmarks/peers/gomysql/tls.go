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

func commonName(s string) pkix.Name {
	if len(s) > 64 {
		s = s[:64]
	}
	return pkix.Name{CommonName: s}
}

// keyFor: a new P-256 key and the template of its certificate (subject, random serial, validity).
func keyFor(subject string, start, end time.Time) (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 159))
	if err != nil {
		return nil, nil, err
	}
	cert := &x509.Certificate{SerialNumber: serial, Subject: commonName(subject), NotBefore: start, NotAfter: end}
	return key, cert, nil
}

// issueTLS: a CA of the cluster's own (ECDSA P-256) signs one server certificate, then its key is dropped.
func issueTLS(o owner, now time.Time) (map[string][]byte, error) {
	start, end := now.Add(-5*time.Minute), now.AddDate(0, 0, validityDays)
	caKey, ca, err := keyFor(o.Name+" replication CA", start, end)
	if err != nil {
		return nil, err
	}
	ca.IsCA, ca.BasicConstraintsValid, ca.MaxPathLenZero = true, true, true
	ca.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	key, server, err := keyFor(o.Name+" database server", start, end)
	if err != nil {
		return nil, err
	}
	server.DNSNames, server.BasicConstraintsValid = o.hosts(), true
	server.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	certDER, err := x509.CreateCertificate(rand.Reader, server, ca, &key.PublicKey, caKey)
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
