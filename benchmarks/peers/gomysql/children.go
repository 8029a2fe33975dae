package main

// The children of one MySQLCluster, as operator/mysql_operator/resources.py builds them: the same
// names, labels, owner references and specs (the scale benchmark's conformance check compares each
// live child with the reference's own builders).

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

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
	group          = "db.example.com"
	apiVersion     = group + "/v1beta1"
	kind           = "MySQLCluster"
	finalizer      = group + "/final-backup"
	retained       = group + "/retained"
	skipFinal      = group + "/skip-final-backup"
	clusterUIDNote = group + "/cluster-uid"
	fieldManager   = "mysql-operator"
	instanceLabel  = "app.kubernetes.io/instance"
	managedBy      = "app.kubernetes.io/managed-by"
	operatorName   = "mysql-operator"
	mysqlPort      = 3306
	passwordKey    = "root-password"
	dataVolume     = "data"
	dataDir        = "/var/lib/mysql"
	backupDir      = "/backup"
	confDir        = "/etc/mysql/conf.d"
	initdbDir      = "/docker-entrypoint-initdb.d"
	backupImage    = "busybox:1.36"
	finalDeadline  = 3600
	finalTTL       = 3600
)

const configureScript = `set -eu
ordinal="${HOSTNAME##*-}"
cat > /etc/mysql/conf.d/server.cnf <<EOF
[mysqld]
server-id=$((100 + ordinal))
gtid-mode=ON
enforce-gtid-consistency=ON
EOF
if [ "$ordinal" -gt 0 ]; then
  cat > /docker-entrypoint-initdb.d/replica.sh <<'EOF'
docker_process_sql <<SQL
CHANGE REPLICATION SOURCE TO SOURCE_HOST='$PRIMARY_HOST', SOURCE_PORT=3306, SOURCE_USER='root',
  SOURCE_PASSWORD='$MYSQL_ROOT_PASSWORD', SOURCE_AUTO_POSITION=1, GET_SOURCE_PUBLIC_KEY=1;
SET PERSIST read_only = ON;
SET PERSIST super_read_only = ON;
START REPLICA;
SQL
EOF
fi
`

const probeCommand = `MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysqladmin ping -h 127.0.0.1 -u root`

const dumpScript = `set -eu
stamp=$(date -u +%Y%m%dT%H%M%SZ)
mysqldump -h "$MYSQL_HOST" -u root --all-databases --single-transaction --routines --events   --triggers > "/backup/.dump-$stamp.sql"
gzip "/backup/.dump-$stamp.sql"
mv "/backup/.dump-$stamp.sql.gz" "/backup/dump-$stamp.sql.gz"
find /backup -maxdepth 1 -name 'dump-*.sql.gz' -mtime "+$((RETENTION_DAYS - 1))" -delete
`

const archiveScript = `set -eu
stamp=$(date -u +%Y%m%dT%H%M%SZ)
tar -czf "/backup/.final-$stamp.tar.gz" -C /var/lib/mysql .
mv "/backup/.final-$stamp.tar.gz" "/backup/final-$stamp.tar.gz"
`

// spec is the part of MySQLCluster.spec the children depend on; defaults as in api.py.
type spec struct {
	Replicas int32  `json:"replicas"`
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
}

func (s *spec) defaults() {
	if s.Version == "" {
		s.Version = "8.0"
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
func (o owner) backup() string         { return o.Name + "-backup" } // the PVC and the CronJob
func (o owner) finalJob() string       { return o.Name + "-final-backup" }
func (o owner) primaryPod() string     { return o.statefulset() + "-0" }
func (o owner) primaryDataPVC() string { return dataVolume + "-" + o.primaryPod() }
func (o owner) image() string          { return "mysql:" + o.Spec.Version }

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

func passwordEnv(o owner, env string) corev1.EnvVar {
	ref := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: o.secret()}, Key: passwordKey}
	return corev1.EnvVar{Name: env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: ref}}
}

func credentialsSecret(o owner) *corev1.Secret {
	buf := make([]byte, 24)
	_, _ = rand.Read(buf)
	m := o.meta(o.secret(), false) // retained with the data: no ownerReference
	m.Annotations = map[string]string{retained: "true"}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: m, Type: corev1.SecretTypeOpaque,
		StringData: map[string]string{passwordKey: base64.RawURLEncoding.EncodeToString(buf)},
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
	selector["statefulset.kubernetes.io/pod-name"] = o.primaryPod()
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
	claim, err := claimSpec(o.Spec)
	if err != nil {
		return nil, err
	}
	res, err := containerResources(o.Spec)
	if err != nil {
		return nil, err
	}
	generated := []corev1.VolumeMount{{Name: "conf", MountPath: confDir}, {Name: "initdb", MountPath: initdbDir}}
	mysql := corev1.Container{
		Name: "mysql", Image: o.image(),
		Ports: []corev1.ContainerPort{{Name: "mysql", ContainerPort: mysqlPort}},
		Env: []corev1.EnvVar{
			passwordEnv(o, "MYSQL_ROOT_PASSWORD"),
			{Name: "PRIMARY_HOST", Value: fmt.Sprintf("%s-0.%s.%s.svc", o.statefulset(), o.headless(), o.Namespace)},
		},
		Resources: res,
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c", probeCommand}}},
			InitialDelaySeconds: 5, PeriodSeconds: 10, TimeoutSeconds: 5,
		},
		VolumeMounts: append([]corev1.VolumeMount{{Name: dataVolume, MountPath: dataDir}}, generated...),
	}
	configure := corev1.Container{
		Name: "configure", Image: o.image(), Command: []string{"sh", "-c", configureScript}, VolumeMounts: generated,
	}
	empty := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
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
					InitContainers:                []corev1.Container{configure},
					Containers:                    []corev1.Container{mysql},
					Volumes:                       []corev1.Volume{{Name: "conf", VolumeSource: empty}, {Name: "initdb", VolumeSource: empty}},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: dataVolume, Labels: labels(o.Name)},
				Spec:       claim,
			}},
		},
	}, nil
}

func backupPVC(o owner) (*corev1.PersistentVolumeClaim, error) {
	claim, err := claimSpec(o.Spec)
	if err != nil {
		return nil, err
	}
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
	container := corev1.Container{
		Name: "mysqldump", Image: o.image(), Command: []string{"sh", "-c", dumpScript},
		Env: []corev1.EnvVar{
			passwordEnv(o, "MYSQL_PWD"),
			{Name: "MYSQL_HOST", Value: fmt.Sprintf("%s.%s.svc", o.primary(), o.Namespace)},
			{Name: "RETENTION_DAYS", Value: fmt.Sprint(s.RetentionDays)},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "backup", MountPath: backupDir}},
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
							RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{container},
							Volumes: []corev1.Volume{backupVolume(o)},
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
func finalBackupJob(o owner) *batchv1.Job {
	m := o.meta(o.finalJob(), false)
	m.Labels = podLabels(o.Name, "final-backup")
	m.Annotations = map[string]string{clusterUIDNote: o.UID}
	data := &corev1.PersistentVolumeClaimVolumeSource{ClaimName: o.primaryDataPVC(), ReadOnly: true}
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: m,
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(int32(0)), ActiveDeadlineSeconds: ptr.To(int64(finalDeadline)),
			TTLSecondsAfterFinished: ptr.To(int32(finalTTL)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels(o.Name, "final-backup")},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "archive", Image: backupImage, Command: []string{"sh", "-c", archiveScript},
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
	}
}
