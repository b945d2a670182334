package deploy_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/outbox-dev/outbox/internal/cli"
	"github.com/outbox-dev/outbox/internal/daemon"
	"github.com/outbox-dev/outbox/internal/telemetry"
)

// decodeStrict decodes a YAML manifest into out, failing on any field out's
// type does not have: a misspelt or misplaced field (readinessProbe one
// level too deep) is silently ignored by a lenient apply.
func decodeStrict(t *testing.T, path string, raw []byte, out any) {
	t.Helper()
	js, err := yaml.YAMLToJSON(raw)
	require.NoError(t, err, path)
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(out), path)
}

// serveVariables are the environment variables outboxd reads, from the env
// tags of cli.Config and OpenTelemetry's that it honours
// (telemetry.Variables), with whether each is a secret.
func serveVariables(t *testing.T) map[string]bool {
	t.Helper()
	vars := map[string]bool{}
	typ := reflect.TypeFor[cli.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if name != "" {
			vars[name] = f.Tag.Get("secret") == "true"
		}
	}
	require.Contains(t, vars, "DATABASE_URL")
	maps.Copy(vars, telemetry.Variables)
	return vars
}

// manifests are deploy/kubernetes's objects, decoded.
type manifests struct {
	admin      *corev1.Service
	api        *corev1.Service
	deployment *appsv1.Deployment
	job        *batchv1.Job
	pdb        *policyv1.PodDisruptionBudget
}

// TestKubernetesManifests decodes every manifest of deploy/kubernetes
// strictly into k8s.io/api's types, checks that it sets only variables serve
// reads (secrets only from Secrets), and that the pieces fit: probes on the
// admin listener, a grace period above the effect timeout, resources above
// the measured RSS, Services and the budget selecting serve's pods.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()

	var kustomization struct {
		Resources []string `json:"resources"`
	}
	raw, err := os.ReadFile("kubernetes/kustomization.yaml")
	require.NoError(t, err)
	decodeStrict(t, "kustomization.yaml", raw, &kustomization)

	paths, err := filepath.Glob("kubernetes/*.yaml")
	require.NoError(t, err)
	var m manifests
	var listed []string
	for _, path := range paths {
		if filepath.Base(path) == "kustomization.yaml" {
			continue
		}
		listed = append(listed, filepath.Base(path))
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		var meta metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal(raw, &meta), path)
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			m.deployment = new(appsv1.Deployment)
			decodeStrict(t, path, raw, m.deployment)
		case "batch/v1 Job":
			m.job = new(batchv1.Job)
			decodeStrict(t, path, raw, m.job)
		case "policy/v1 PodDisruptionBudget":
			m.pdb = new(policyv1.PodDisruptionBudget)
			decodeStrict(t, path, raw, m.pdb)
		case "v1 Service":
			service := new(corev1.Service)
			decodeStrict(t, path, raw, service)
			if service.Name == "outboxd-admin" {
				m.admin = service
			} else {
				m.api = service
			}
		default:
			// A Secret above all: the manifests reference Secrets, and
			// never carry their values.
			t.Fatalf("%s: unexpected %s %s", path, meta.APIVersion, meta.Kind)
		}
	}
	slices.Sort(listed)
	slices.Sort(kustomization.Resources)
	require.Equal(t, listed, kustomization.Resources, "kustomization.yaml lists every manifest")
	require.NotNil(t, m.deployment)
	require.NotNil(t, m.job)
	require.NotNil(t, m.pdb)
	require.NotNil(t, m.api)
	require.NotNil(t, m.admin)

	vars := serveVariables(t)
	for _, spec := range []corev1.PodSpec{m.deployment.Spec.Template.Spec, m.job.Spec.Template.Spec} {
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			require.Empty(t, c.EnvFrom, "%s: envFrom would set variables nobody checks", c.Name)
			for _, env := range c.Env {
				secret, known := vars[env.Name]
				require.True(t, known, "%s sets %s, which serve does not read", c.Name, env.Name)
				if secret {
					require.Empty(t, env.Value, "%s: %s is a secret: from a Secret, not a value", c.Name, env.Name)
					require.NotNil(t, env.ValueFrom, "%s: %s", c.Name, env.Name)
					require.NotNil(t, env.ValueFrom.SecretKeyRef, "%s: %s", c.Name, env.Name)
				}
			}
		}
	}

	// serve: probes on the admin listener, which OUTBOX_ADMIN_ADDR opens.
	pod := m.deployment.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	serve := pod.Containers[0]
	require.Equal(t, []string{"serve"}, serve.Args)
	env := map[string]string{}
	for _, e := range serve.Env {
		env[e.Name] = e.Value
	}
	ports := map[string]int32{}
	for _, p := range serve.Ports {
		ports[p.Name] = p.ContainerPort
	}
	port := func(addr string) int32 {
		_, p, err := net.SplitHostPort(addr)
		require.NoError(t, err, addr)
		n, err := net.LookupPort("tcp", p)
		require.NoError(t, err)
		return int32(n)
	}
	require.Equal(t, port(env["OUTBOX_HTTP_ADDR"]), ports["http"])
	require.Equal(t, port(env["OUTBOX_ADMIN_ADDR"]), ports["admin"])
	require.NotNil(t, serve.LivenessProbe)
	require.NotNil(t, serve.ReadinessProbe)
	require.Equal(t, "/healthz", serve.LivenessProbe.HTTPGet.Path)
	require.Equal(t, "/readyz", serve.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, intstr.FromString("admin"), serve.LivenessProbe.HTTPGet.Port)
	require.Equal(t, intstr.FromString("admin"), serve.ReadinessProbe.HTTPGet.Port)

	// The grace period covers the stop: preStop, running attempts'
	// timeout, recording their outcomes, the HTTP server's shutdown.
	effectTimeout, err := time.ParseDuration(env["OUTBOX_EFFECT_TIMEOUT"])
	require.NoError(t, err)
	var preStop time.Duration
	if serve.Lifecycle != nil && serve.Lifecycle.PreStop != nil && serve.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(serve.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	stop := preStop + effectTimeout + daemon.DispatcherStopGrace + daemon.HTTPShutdownTimeout
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	require.Greater(t, time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second, stop)

	// Resources from the measured peak RSS, about 51 MB (docs/design.md):
	// a request below it would place pods where they cannot run; a limit
	// below twice it would kill them under a burst.
	measuredRSS := resource.MustParse("51M")
	request, limit := serve.Resources.Requests[corev1.ResourceMemory], serve.Resources.Limits[corev1.ResourceMemory]
	require.Equal(t, 1, request.Cmp(measuredRSS), "memory request %s", request.String())
	measuredRSS.Add(measuredRSS)
	require.GreaterOrEqual(t, limit.Cmp(measuredRSS), 0, "memory limit %s", limit.String())
	// No CPU limit: throttling stretches provider calls toward the
	// effect timeout, turning slow calls into lost outcomes.
	require.True(t, serve.Resources.Limits.Cpu().IsZero(), "CPU limit %s", serve.Resources.Limits.Cpu())

	// The tokens file is a mounted Secret.
	var tokensVolume string
	for _, mount := range serve.VolumeMounts {
		if strings.HasPrefix(env["OUTBOX_API_TOKENS_FILE"], mount.MountPath+"/") {
			tokensVolume = mount.Name
		}
	}
	require.NotEmpty(t, tokensVolume, "OUTBOX_API_TOKENS_FILE is on no mount")
	found := false
	for _, v := range pod.Volumes {
		if v.Name == tokensVolume {
			require.NotNil(t, v.Secret, "the tokens come from a Secret")
			found = true
		}
	}
	require.True(t, found)

	// The Job migrates.
	require.Len(t, m.job.Spec.Template.Spec.Containers, 1)
	require.Equal(t, []string{"migrate", "up"}, m.job.Spec.Template.Spec.Containers[0].Args)

	// The Services and the budget select serve's pods, on its ports.
	podLabels := m.deployment.Spec.Template.Labels
	selects := func(selector map[string]string) bool {
		for k, v := range selector {
			if podLabels[k] != v {
				return false
			}
		}
		return len(selector) > 0
	}
	require.True(t, selects(m.deployment.Spec.Selector.MatchLabels))
	require.True(t, selects(m.pdb.Spec.Selector.MatchLabels))
	require.True(t, selects(m.api.Spec.Selector))
	require.True(t, selects(m.admin.Spec.Selector))
	require.Len(t, m.api.Spec.Ports, 1)
	require.Equal(t, intstr.FromString("http"), m.api.Spec.Ports[0].TargetPort)
	require.Len(t, m.admin.Spec.Ports, 1)
	require.Equal(t, intstr.FromString("admin"), m.admin.Spec.Ports[0].TargetPort)
	// The budget leaves a replica through a drain, and there are more.
	require.NotNil(t, m.pdb.Spec.MinAvailable)
	require.Greater(t, *m.deployment.Spec.Replicas, m.pdb.Spec.MinAvailable.IntVal)
}
