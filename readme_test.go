package reconcile_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Every Kubernetes manifest README.md shows decodes strictly into its API
// type, so that a misspelt or misplaced field fails here rather than at
// a platform engineer's first `kubectl apply`; and the CronJob keeps what
// its text promises.
func TestReadmeKubernetesManifests(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	kinds := map[string]int{}
	for _, b := range blocks {
		doc := b[1]
		if !strings.Contains(doc, "apiVersion:") {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("a manifest does not parse: %v\n%s", err, doc)
		}
		kinds[head.Kind]++
		switch head.APIVersion + " " + head.Kind {
		case "batch/v1 CronJob":
			var cj batchv1.CronJob
			strict(t, doc, &cj)
			j := cj.Spec.JobTemplate.Spec
			c := j.Template.Spec.Containers[0]
			if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent || j.ActiveDeadlineSeconds == nil {
				t.Errorf("the CronJob forbids overlap without a deadline: a hung run would block every later night")
			}
			if !strings.Contains(strings.Join(c.Args, " "), "--fail-on critical") {
				t.Errorf("the CronJob's args %q lack the crontab line's --fail-on critical", c.Args)
			}
			nonRoot(t, head.Kind, j.Template.Spec.SecurityContext)
			if c.Resources.Requests.Memory().IsZero() {
				t.Error("the CronJob requests no memory")
			}
		case "batch/v1 Job":
			var job batchv1.Job
			strict(t, doc, &job)
			if a := job.Spec.Template.Spec.Containers[0].Args; len(a) == 0 || a[0] != "migrate" {
				t.Errorf("the Job runs %q, want migrate", a)
			}
			nonRoot(t, head.Kind, job.Spec.Template.Spec.SecurityContext)
		case "apps/v1 Deployment":
			var d appsv1.Deployment
			strict(t, doc, &d)
			c := d.Spec.Template.Spec.Containers[0]
			switch {
			case len(c.Args) > 0 && c.Args[0] == "worker":
				// A worker lets its running jobs finish for 20s on
				// SIGTERM (queue.DefaultStopTimeout): the pod must wait
				// longer before it is killed.
				if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g <= 30 {
					t.Errorf("the workers' Deployment gives them %v seconds to stop, want more than 30", g)
				}
				kinds["worker Deployment"]++
			case len(c.Args) == 0 || c.Args[0] != "serve" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz":
				t.Errorf("the Deployment runs %q with readiness %+v, want serve probed on /healthz", c.Args, c.ReadinessProbe)
			}
			nonRoot(t, head.Kind, d.Spec.Template.Spec.SecurityContext)
		default:
			t.Errorf("README shows a %s %s this test does not check", head.APIVersion, head.Kind)
		}
	}
	for k, n := range map[string]int{"CronJob": 1, "Job": 1, "Deployment": 2, "worker Deployment": 1} {
		if kinds[k] != n {
			t.Errorf("README shows %d %s manifests, want %d", kinds[k], k, n)
		}
	}
}

func strict(t *testing.T, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Errorf("%T: %v\n%s", into, err, doc)
	}
}

func nonRoot(t *testing.T, kind string, sc *corev1.PodSecurityContext) {
	t.Helper()
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("the %s may run as root", kind)
	}
}
