package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"reconcile/internal/redact"
)

// Job is the Pushgateway grouping key's job of every batch run.
const Job = "reconcile"

// pushTimeout bounds one push: a gateway that hangs must not hold up the
// end of a run for long.
const pushTimeout = 10 * time.Second

// Push sends b's metrics to the Pushgateway at gateway, grouped by job
// "reconcile" and instance, as Prometheus recommends for batch jobs.
//
// A run that read the store (b.Store set) knows every figure, the last
// success among them (the store's newest completed run), so it replaces
// the group (PUT, Pusher.Push): money no longer at risk and Stripe counts
// a failed pass did not return disappear instead of going stale. A run
// that could not read the store adds (POST, Pusher.Add): it replaces only
// the metrics it knows, and the last success, the findings, the money and
// the backlog stay as the last run that read the store pushed them, which
// is what Prometheus's advice to use Add for batch jobs protects.
//
// Credentials in gateway's URL (https://user:pass@host) are sent as basic
// auth; the error never carries them.
func Push(ctx context.Context, gateway, instance string, b BatchRun) error {
	u, err := url.Parse(gateway)
	if err != nil {
		return errors.New("metrics.pushgateway: not a URL")
	}
	user := u.User
	u.User = nil
	p := push.New(u.String(), Job).Grouping("instance", instance).Gatherer(b.Registry()).
		Client(&http.Client{Timeout: pushTimeout})
	if user != nil {
		pass, _ := user.Password()
		p = p.BasicAuth(user.Username(), pass)
	}
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	if b.Store != nil {
		err = p.PushContext(ctx)
	} else {
		err = p.AddContext(ctx)
	}
	if err != nil {
		return fmt.Errorf("push to %s: %s", redact.URL(gateway, false), redact.Line(err.Error()))
	}
	return nil
}

// WriteTextfile writes b's metrics for node_exporter's textfile collector
// to path, atomically: to a temporary file in the same directory (whose
// name does not end in .prom, so the collector never reads it half
// written), then renamed over path, mode 0644.
//
// As Push does, a run that read the store writes the whole file; one that
// could not keeps the metrics of the file already there that it does not
// know (the last success among them). A file there that does not parse is
// replaced.
func WriteTextfile(path string, b BatchRun) error {
	fams, err := b.Registry().Gather()
	if err != nil {
		return fmt.Errorf("metrics.textfile: %w", err)
	}
	if b.Store == nil {
		fams = keepOthers(path, fams)
	}
	var buf bytes.Buffer
	for _, mf := range fams {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			return fmt.Errorf("metrics.textfile: %w", err)
		}
	}
	if err := writeAtomic(path, buf.Bytes()); err != nil {
		return fmt.Errorf("metrics.textfile: %w", err)
	}
	return nil
}

// writeAtomic writes b to a temporary file beside path and renames it
// over path, mode 0644: a reader sees the old file or the new one whole.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, nothing is there
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	return err
}

// keepOthers adds to fams the families of the file at path that fams does
// not have, sorted by name as a registry gathers them; never an earlier
// run's reconcile_last_run_* figures, which would pass for this run's.
func keepOthers(path string, fams []*dto.MetricFamily) []*dto.MetricFamily {
	old, err := ParseText(path)
	if err != nil {
		return fams
	}
	for name, mf := range old {
		if strings.HasPrefix(name, "reconcile_last_run_") {
			continue
		}
		if !slices.ContainsFunc(fams, func(f *dto.MetricFamily) bool { return f.GetName() == name }) {
			fams = append(fams, mf)
		}
	}
	slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return fams
}

// ParseText reads a file in Prometheus's text format with Prometheus's
// own parser, as node_exporter does.
func ParseText(path string) (map[string]*dto.MetricFamily, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(f)
}
