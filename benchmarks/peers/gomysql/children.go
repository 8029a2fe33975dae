package main

// The children of one MySQLCluster, as operator/mysql_operator/controller/children/resources.py builds them: the same
// names, labels, owner references and specs (the scale benchmark's conformance check compares each
// live child with the reference's own builders). The scripts the pods run are the reference's own
// texts, generated into scripts.go by genscripts.py.

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"math/big"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const (
	group           = "db.example.com"
	version         = "v1" // the hub and storage version: what owner references name
	apiVersion      = group + "/" + version
	kind            = "MySQLCluster"
	finalizer       = group + "/final-backup"
	retained        = group + "/retained"
	skipFinal       = group + "/skip-final-backup"
	clusterUIDNote  = group + "/cluster-uid"
	fieldManager    = "mysql-operator"
	instanceLabel   = "app.kubernetes.io/instance"
	managedBy       = "app.kubernetes.io/managed-by"
	operatorName    = "mysql-operator"
	mysqlPort       = 3306
	passwordKey     = "root-password"
	replicationKey  = "replication-password"
	replicationNote = group + "/replication-password" // on the Secret: it holds replicationKey
	dataVolume      = "data"
	dataDir         = "/var/lib/mysql"
	backupDir       = "/backup"
	restoreDir      = "/restore"
	confDir         = "/etc/mysql/conf.d"
	initdbDir       = "/docker-entrypoint-initdb.d"
	runDir          = "/run/mysql-operator"
	podinfoDir      = "/etc/podinfo"
	tlsSourceDir    = "/etc/mysql-operator/tls"
	roleLabel       = group + "/role"
	backupImage     = "busybox:1.36"
	finalFloor      = 600     // seconds every final backup gets, whatever the size
	finalRate       = 5 << 20 // bytes/s: the slowest archive rate planned for
	finalTTL        = 3600
)

// spec is the part of MySQLCluster.spec the children depend on; defaults as in api.py.
type spec struct {
	Replicas int32  `json:"replicas"`
	Engine   string `json:"engine"`
	Version  string `json:"version"`
	Storage  struct {
		Size             string `json:"size"`
		StorageClassName string `json:"storageClassName,omitempty"`
	} `json:"storage"`
	Resources *struct {
		CPU    string `json:"cpu,omitempty"`
		Memory string `json:"memory,omitempty"`
	} `json:"resources,omitempty"`
	Backup struct {
		Enabled  bool `json:"enabled"`
		Schedule struct {
			Cron     string `json:"cron"`
			TimeZone string `json:"timeZone,omitempty"`
		} `json:"schedule"`
		RetentionDays int `json:"retentionDays"`
	} `json:"backup"`
	Restore *struct {
		FromCluster string `json:"fromCluster"`
	} `json:"restore,omitempty"`
	Replication struct {
		SemiSync bool `json:"semiSync"`
	} `json:"replication"`
}

func (s *spec) defaults() {
	if s.Engine == "" {
		s.Engine = "mysql"
	}
	if s.Version == "" {
		s.Version = engines[s.Engine].defaultVersion
	}
	if s.Backup.Schedule.Cron == "" {
		s.Backup.Schedule.Cron = "0 2 * * *"
	}
	if s.Backup.RetentionDays == 0 {
		s.Backup.RetentionDays = 7
	}
}

// owner is what a child needs of its cluster.
type owner struct {
	Name, Namespace string
	UID             string
	Spec            spec
}

func (o owner) statefulset() string    { return o.Name + "-mysql" }
func (o owner) headless() string       { return o.Name + "-headless" }
func (o owner) primary() string        { return o.Name + "-primary" }
func (o owner) secret() string         { return o.Name + "-credentials" }
func (o owner) tls() string            { return o.Name + "-tls" }
func (o owner) backup() string         { return o.Name + "-backup" } // the PVC and the CronJob
func (o owner) finalJob() string       { return o.Name + "-final-backup" }
func (o owner) primaryPod() string     { return o.statefulset() + "-0" }
func (o owner) primaryDataPVC() string { return dataVolume + "-" + o.primaryPod() }
func (o owner) image() string          { return o.Spec.Engine + ":" + o.Spec.Version }
func (o owner) engine() engineScripts  { return engines[o.Spec.Engine] }

func labels(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "mysql", instanceLabel: name, managedBy: operatorName}
}

func podLabels(name, component string) map[string]string {
	l := labels(name)
	l["app.kubernetes.io/component"] = component
	return l
}

func (o owner) meta(name string, owned bool) metav1.ObjectMeta {
	m := metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: labels(o.Name)}
	if owned {
		m.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: apiVersion, Kind: kind, Name: o.Name, UID: types.UID(o.UID),
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}
	}
	return m
}

func passwordEnv(o owner, env, key string) corev1.EnvVar {
	ref := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: o.secret()}, Key: key}
	return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref}}
}

func newPassword() string {
	buf := make([]byte, 24)
	_, _ = rand.Read(buf)
	return base64.RawURLEncoding.EncodeToString(buf)
}

func credentialsSecret(o owner) *corev1.Secret {
	m := o.meta(o.secret(), false) // retained with the data: no ownerReference
	m.Annotations = map[string]string{retained: "true", replicationNote: "true"}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: m, Type: corev1.SecretTypeOpaque,
		StringData: map[string]string{passwordKey: newPassword(), replicationKey: newPassword()},
	}
}

func mysqlPorts() []corev1.ServicePort {
	return []corev1.ServicePort{{Name: "mysql", Port: mysqlPort, TargetPort: intstr.FromInt32(mysqlPort)}}
}

func headlessService(o owner) *corev1.Service {
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: o.meta(o.headless(), true),
		Spec: corev1.ServiceSpec{
			ClusterIP: "None", PublishNotReadyAddresses: true,
			Selector: podLabels(o.Name, "database"), Ports: mysqlPorts(),
		},
	}
}

func primaryService(o owner) *corev1.Service {
	selector := podLabels(o.Name, "database")
	selector[roleLabel] = "primary"
	return &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: o.meta(o.primary(), true),
		Spec: corev1.ServiceSpec{Selector: selector, Ports: mysqlPorts()},
	}
}

func claimSpec(s spec) (corev1.PersistentVolumeClaimSpec, error) {
	size, err := resource.ParseQuantity(s.Storage.Size)
	if err != nil {
		return corev1.PersistentVolumeClaimSpec{}, fmt.Errorf("spec.storage.size: %w", err)
	}
	c := corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
	}
	if s.Storage.StorageClassName != "" {
		c.StorageClassName = ptr.To(s.Storage.StorageClassName)
	}
	return c, nil
}

// containerResources: requests equal limits for what is given (Guaranteed QoS).
func containerResources(s spec) (corev1.ResourceRequirements, error) {
	list := corev1.ResourceList{}
	if s.Resources != nil {
		for name, value := range map[corev1.ResourceName]string{"cpu": s.Resources.CPU, "memory": s.Resources.Memory} {
			if value == "" {
				continue
			}
			q, err := resource.ParseQuantity(value)
			if err != nil {
				return corev1.ResourceRequirements{}, fmt.Errorf("spec.resources.%s: %w", name, err)
			}
			list[name] = q
		}
	}
	if len(list) == 0 {
		return corev1.ResourceRequirements{}, nil
	}
	return corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}, nil
}

func statefulSet(o owner) (*appsv1.StatefulSet, error) {
	if _, known := engines[o.Spec.Engine]; !known {
		return nil, fmt.Errorf("spec.engine %q: not one of mysql, mariadb", o.Spec.Engine)
	}
	claim, err := claimSpec(o.Spec)
	if err != nil {
		return nil, err
	}
	res, err := containerResources(o.Spec)
	if err != nil {
		return nil, err
	}
	conf := corev1.VolumeMount{Name: "conf", MountPath: confDir}
	initdb := corev1.VolumeMount{Name: "initdb", MountPath: initdbDir}
	run := corev1.VolumeMount{Name: "run", MountPath: runDir}
	podinfo := corev1.VolumeMount{Name: "podinfo", MountPath: podinfoDir, ReadOnly: true}
	data := corev1.VolumeMount{Name: dataVolume, MountPath: dataDir}
	rootPassword := passwordEnv(o, "MYSQL_ROOT_PASSWORD", passwordKey)
	semi := corev1.EnvVar{Name: "SEMI_SYNC", Value: "off"}
	if o.Spec.Replication.SemiSync {
		semi.Value = "on"
	}
	mysql := corev1.Container{
		Name: "mysql", Image: o.image(),
		Command:   []string{"sh", "-c", o.engine().start, "sh", o.engine().server},
		Ports:     []corev1.ContainerPort{{Name: "mysql", ContainerPort: mysqlPort}},
		Env:       []corev1.EnvVar{rootPassword},
		Resources: res,
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", o.engine().probe}}},
			InitialDelaySeconds: 5, PeriodSeconds: 5, TimeoutSeconds: 5,
		},
		VolumeMounts: []corev1.VolumeMount{data, conf, initdb, run, podinfo},
	}
	configure := corev1.Container{
		Name: "configure", Image: o.image(), Command: []string{"sh", "-c", o.engine().configure},
		Env:                      append([]corev1.EnvVar{rootPassword, semi}, identityEnv(o)...),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts: []corev1.VolumeMount{
			conf, initdb, data, run, {Name: "tls", MountPath: tlsSourceDir, ReadOnly: true},
		},
	}
	sidecarResources := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(sidecarCPU), corev1.ResourceMemory: resource.MustParse(sidecarMemory),
	}
	sidecar := corev1.Container{
		Name: "replication", Image: o.image(), Command: []string{"sh", "-c", o.engine().replication},
		// conf: the server's start flags a wiped datadir; data: the datadir's fresh marker
		VolumeMounts: []corev1.VolumeMount{conf, run, podinfo, data},
		Env: []corev1.EnvVar{
			passwordEnv(o, "REPLICATION_PASSWORD", replicationKey),
			{Name: "REPLICATION_USER", Value: replicationUser},
			{Name: "PRIMARY_HOST", Value: fmt.Sprintf("%s.%s.svc", o.primary(), o.Namespace)},
			semi,
		},
		// Requests equal limits, as the server's: the sidecar never makes the pod less than Guaranteed.
		Resources: corev1.ResourceRequirements{Requests: sidecarResources, Limits: sidecarResources.DeepCopy()},
	}
	empty := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	memory := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi")),
	}}
	labelsFile := corev1.DownwardAPIVolumeFile{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}
	annotationsFile := corev1.DownwardAPIVolumeFile{
		Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"},
	}
	inits := []corev1.Container{configure}
	volumes := []corev1.Volume{
		{Name: "conf", VolumeSource: empty},
		{Name: "initdb", VolumeSource: empty},
		{Name: "run", VolumeSource: memory},
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
			Items: []corev1.DownwardAPIVolumeFile{labelsFile, annotationsFile},
		}}},
		{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: o.tls(), DefaultMode: ptr.To(int32(0o400)),
		}}},
	}
	if restore, volume := restoreParts(o); restore != nil {
		inits = append([]corev1.Container{*restore}, inits...) // fills the datadir before configure
		volumes = append(volumes, volume)
	}
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: o.meta(o.statefulset(), true),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(o.Spec.Replicas),
			ServiceName: o.headless(),
			Selector:    &metav1.LabelSelector{MatchLabels: podLabels(o.Name, "database")},
			// Deleting the cluster or scaling down never deletes data.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(o.Name, "database")},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(120)),
					InitContainers:                inits,
					Containers:                    []corev1.Container{mysql, sidecar},
					Volumes:                       volumes,
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: dataVolume, Labels: labels(o.Name)},
				Spec:       claim,
			}},
		},
	}, nil
}

// identityEnv is what a datadir or a restored archive is judged against: this release, the cluster,
// and the release an asked-for upgrade starts from (none: the peer keeps no status of that kind).
func identityEnv(o owner) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "SERVER_VERSION", Value: o.Spec.Version},
		{Name: "CLUSTER_NAME", Value: o.Name},
		{Name: "CLUSTER_UID", Value: o.UID},
		{Name: "UPGRADE_FROM", Value: ""},
	}
}

// restricted is the restricted Pod Security Standard for the backup pods, as the official images'
// mysql user (the peer keeps no status.datadirOwner).
func restricted() (*corev1.PodSecurityContext, *corev1.SecurityContext) {
	pod := &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(999)), RunAsGroup: ptr.To(int64(999)),
		FSGroup: ptr.To(int64(999)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	container := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		ReadOnlyRootFilesystem:   ptr.To(true),
	}
	return pod, container
}

// restoreParts: with spec.restore, the init container that unpacks the source cluster's newest final
// backup into pod 0's empty datadir, and the source's backup PVC (read-only) it reads; nil otherwise.
func restoreParts(o owner) (*corev1.Container, corev1.Volume) {
	if o.Spec.Restore == nil {
		return nil, corev1.Volume{}
	}
	sourcePVC := o.Spec.Restore.FromCluster + "-backup"
	container := &corev1.Container{
		Name: "restore", Image: backupImage, Command: []string{"sh", "-c", restoreScript},
		Env: []corev1.EnvVar{
			{Name: "SOURCE_CLUSTER", Value: o.Spec.Restore.FromCluster},
			{Name: "SOURCE_PVC", Value: sourcePVC},
			{Name: "ENGINE", Value: o.Spec.Engine},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts: []corev1.VolumeMount{
			{Name: dataVolume, MountPath: dataDir},
			{Name: "restore", MountPath: restoreDir, ReadOnly: true},
		},
	}
	container.Env = append(container.Env, identityEnv(o)...)
	src := &corev1.PersistentVolumeClaimVolumeSource{ClaimName: sourcePVC, ReadOnly: true}
	return container, corev1.Volume{Name: "restore", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: src}}
}

// bytesOf is a quantity's exact value in bytes (a fraction where the quantity has one).
func bytesOf(q resource.Quantity) *big.Rat {
	r, _ := new(big.Rat).SetString(q.AsDec().String())
	return r
}

// ceil rounds a non-negative rational up to a whole number.
func ceil(r *big.Rat) int64 {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// backupSize is the backup volume's request: one final archive at the full data size plus
// retentionDays+1 dumps at half of it, data * (retentionDays + 3) / 2, in whole MiB.
func backupSize(s spec) (resource.Quantity, error) {
	data, err := resource.ParseQuantity(s.Storage.Size)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("spec.storage.size: %w", err)
	}
	// Two final archives at the data size, retentionDays + 1 dumps at half of it.
	wanted := new(big.Rat).Mul(bytesOf(data), big.NewRat(int64(s.Backup.RetentionDays+5), 2<<20))
	return resource.MustParse(fmt.Sprintf("%dMi", ceil(wanted))), nil
}

// finalDeadline is the final backup's activeDeadlineSeconds: a floor plus the data volume's size
// at the slowest archive rate planned for.
func finalDeadline(s spec) (int64, error) {
	data, err := resource.ParseQuantity(s.Storage.Size)
	if err != nil {
		return 0, fmt.Errorf("spec.storage.size: %w", err)
	}
	return finalFloor + ceil(new(big.Rat).Mul(bytesOf(data), big.NewRat(1, finalRate))), nil
}

func backupPVC(o owner) (*corev1.PersistentVolumeClaim, error) {
	claim, err := claimSpec(o.Spec)
	if err != nil {
		return nil, err
	}
	size, err := backupSize(o.Spec)
	if err != nil {
		return nil, err
	}
	claim.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: size}
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: o.meta(o.backup(), false), Spec: claim,
	}, nil
}

func backupVolume(o owner) corev1.Volume {
	src := &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.backup()}
	return corev1.Volume{Name: "backup", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: src}}
}

func backupCronJob(o owner) *batchv1.CronJob {
	s := o.Spec.Backup
	podSecurity, containerSecurity := restricted()
	container := corev1.Container{
		Name: "mysqldump", Image: o.image(), Command: []string{"sh", "-c", dumpScript},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext:          containerSecurity,
		Env: []corev1.EnvVar{
			passwordEnv(o, "DB_PASSWORD", passwordKey),
			{Name: "DUMP", Value: o.engine().dump},
			{Name: "MYSQL_HOST", Value: fmt.Sprintf("%s.%s.svc", o.primary(), o.Namespace)},
			{Name: "RETENTION_DAYS", Value: fmt.Sprint(s.RetentionDays)},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "backup", MountPath: backupDir}, {Name: "run", MountPath: runDir},
		},
	}
	memory := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("1Mi")),
	}}
	// Preferred near the primary (its node, else its zone): that puts a WaitForFirstConsumer backup
	// volume where the final backup Job will need it.
	primary := podLabels(o.Name, "database")
	primary[roleLabel] = "primary"
	pod0 := &metav1.LabelSelector{MatchLabels: primary}
	var nearPrimary []corev1.WeightedPodAffinityTerm
	for _, t := range []struct {
		weight int32
		key    string
	}{{100, "kubernetes.io/hostname"}, {50, "topology.kubernetes.io/zone"}} {
		nearPrimary = append(nearPrimary, corev1.WeightedPodAffinityTerm{
			Weight: t.weight, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: pod0, TopologyKey: t.key},
		})
	}
	cj := &batchv1.CronJob{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "CronJob"},
		ObjectMeta: o.meta(o.backup(), true),
		Spec: batchv1.CronJobSpec{
			Schedule: s.Schedule.Cron, ConcurrencyPolicy: batchv1.ForbidConcurrent,
			SuccessfulJobsHistoryLimit: ptr.To(int32(3)), FailedJobsHistoryLimit: ptr.To(int32(3)),
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(o.Name, "backup")},
				Spec: batchv1.JobSpec{
					BackoffLimit: ptr.To(int32(2)),
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: podLabels(o.Name, "backup")},
						Spec: corev1.PodSpec{
							RestartPolicy:   corev1.RestartPolicyNever,
							SecurityContext: podSecurity,
							Affinity: &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
								PreferredDuringSchedulingIgnoredDuringExecution: nearPrimary,
							}},
							Containers: []corev1.Container{container},
							Volumes:    []corev1.Volume{backupVolume(o), {Name: "run", VolumeSource: memory}},
						},
					},
				},
			},
		},
	}
	if s.Schedule.TimeZone != "" {
		cj.Spec.TimeZone = ptr.To(s.Schedule.TimeZone)
	}
	return cj
}

// finalBackupJob archives the stopped primary's data volume (read-only) into the backup PVC; no
// ownerReference, it outlives the cluster, and the annotation tells it from an earlier cluster's.
// No node affinity: the reference takes it from the data PersistentVolume, which the peer does not
// read, and builds none where it has none.
func finalBackupJob(o owner) (*batchv1.Job, error) {
	deadline, err := finalDeadline(o.Spec)
	if err != nil {
		return nil, err
	}
	m := o.meta(o.finalJob(), false)
	m.Labels = podLabels(o.Name, "final-backup")
	m.Annotations = map[string]string{clusterUIDNote: o.UID}
	data := &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.primaryDataPVC(), ReadOnly: true}
	podSecurity, containerSecurity := restricted()
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: m,
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(0)), ActiveDeadlineSeconds: ptr.To(deadline),
			TTLSecondsAfterFinished: ptr.To(int32(finalTTL)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(o.Name, "final-backup")},
				Spec: corev1.PodSpec{
					RestartPolicy:   corev1.RestartPolicyNever,
					SecurityContext: podSecurity,
					Containers: []corev1.Container{{
						Name: "archive", Image: backupImage, Command: []string{"sh", "-c", archiveScript},
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						Env:                      []corev1.EnvVar{{Name: "CLUSTER_UID", Value: o.UID}},
						SecurityContext:          containerSecurity,
						VolumeMounts: []corev1.VolumeMount{
							{Name: dataVolume, MountPath: dataDir, ReadOnly: true},
							{Name: "backup", MountPath: backupDir},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: dataVolume, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: data}},
						backupVolume(o),
					},
				},
			},
		},
	}, nil
}
