package main

import (
	"context"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"reconcile/internal/pgtest"
)

// chromium finds a headless-capable Chromium: $CHROMIUM, else Debian's
// package. Without one the browser test is skipped, unless
// RECONCILE_REQUIRE_BROWSER is set (as CI sets it), which fails it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("RECONCILE_REQUIRE_BROWSER") != "" {
		t.Fatal("no Chromium found (set CHROMIUM, or apt-get install chromium) and RECONCILE_REQUIRE_BROWSER is set")
	}
	t.Skip("no Chromium found: set CHROMIUM or apt-get install chromium to run the browser test")
	return ""
}

// artefacts is where the browser test leaves its screenshots:
// $TEST_ARTEFACTS, else reconcile-artefacts under the system's temporary
// directory; kept after the test, for people to look at.
func artefacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TEST_ARTEFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "reconcile-artefacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A real browser walks finance's path over `demo --serve`: the findings
// page, the double refund of order 4821, its timeline, acknowledging it
// with a reason, the CSV of the view, and the finding shown acknowledged.
// Every step waits for what the page must show, so a step that breaks
// fails the test.
func TestBrowserFinanceAcknowledgesTheDoubleRefund(t *testing.T) {
	bin := chromium(t)
	addr, _, _, stop := serving(t, func(k string) string {
		if k == "DATABASE_URL" {
			return pgtest.AdminURL()
		}
		return ""
	}, "demo", "--serve")
	defer stop()
	base := "http://" + addr

	downloads := t.TempDir()
	// Chromium's own scratch directories (its singleton socket among them)
	// go to a TMPDIR of the test's, removed with it, rather than pile up in
	// the system's; a short path, as a socket's may not be long.
	scratch, err := os.MkdirTemp("", "chr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(scratch) })
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1400, 1000),
		chromedp.Env("TMPDIR=" + scratch),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	dir := artefacts(t)
	const dup = `//tr[td/code[text()="refund:4821:approved-request-7"]]`
	const reason = "Customer refunded twice; USD 89.00 recovered by hand"
	step := func(name string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	shot := func(name string) []byte {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG; below it, JPEG
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		return png
	}

	step("open the findings page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(dup+`//a[text()="Paid twice"]`))
	findingsPNG := shot("findings")
	fp, err := chromedp.Run(ctx, chromedp.AttributeValue(dup+`//input[@name="fingerprint"]`, "value"))
	if err != nil || !fp.Exists {
		t.Fatalf("the double refund's row has no fingerprint: %v", err)
	}
	fingerprint := fp.Value

	step("open the double refund's timeline",
		chromedp.Click(dup+`//a[text()="Paid twice"]`),
		chromedp.WaitVisible(`//h2[text()="Timeline"]`),
		chromedp.WaitVisible(`//ol[@class="timeline"]/li[contains(., "Stripe refund created") and .//a[text()="re_4821a"]]`),
		chromedp.WaitVisible(`//ol[@class="timeline"]/li[contains(., "Stripe refund created") and .//a[text()="re_4821b"]]`),
		chromedp.WaitVisible(`//ol[@class="timeline"]/li[contains(., "Found: Paid twice (critical)")]`))
	timelinePNG := shot("timeline")

	step("acknowledge it with a reason",
		chromedp.SendKeys(`//form[@action="/ack"]//input[@name="reason"]`, reason),
		chromedp.Click(`//form[@action="/ack"]//button`),
		chromedp.WaitVisible(`//dd[@id="status" and contains(., "acknowledged by local") and contains(., "`+reason+`")]`),
		chromedp.WaitVisible(`//form[@action="/reopen"]`))

	yes := true
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: downloads, EventsEnabled: &yes}); err != nil {
		t.Fatalf("allow downloads: %v", err)
	}
	step("download the CSV of the view",
		chromedp.Navigate(base+"/?kind=duplicate"),
		chromedp.WaitVisible(`//a[text()="Download CSV"]`),
		chromedp.Click(`//a[text()="Download CSV"]`))
	for name, png := range map[string][]byte{"findings.png": findingsPNG, "timeline.png": timelinePNG} {
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)

	// The download lands under a name of the browser's (its guid): wait
	// for a finished file.
	var rows [][]string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && rows == nil; time.Sleep(100 * time.Millisecond) {
		files, _ := os.ReadDir(downloads)
		for _, f := range files {
			if strings.HasSuffix(f.Name(), ".crdownload") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(downloads, f.Name()))
			if err != nil || len(b) == 0 {
				continue
			}
			if rows, err = csv.NewReader(strings.NewReader(string(b))).ReadAll(); err != nil {
				t.Fatalf("the downloaded CSV does not parse: %v\n%s", err, b)
			}
		}
	}
	if len(rows) != 2 {
		t.Fatalf("the CSV of the duplicates view has %d rows, want the header and the double refund: %q", len(rows), rows)
	}
	col := func(name string) string { return rows[1][slices.Index(rows[0], name)] }
	if col("fingerprint") != fingerprint || col("obligation_id") != "refund:4821:approved-request-7" ||
		col("kind") != "duplicate" || col("currency") != "USD" || col("at_risk") != "89.00" ||
		col("acknowledged_by") != "local" || col("ack_reason") != reason {
		t.Errorf("the CSV's row = %q under %q", rows[1], rows[0])
	}

	// Back on the findings page it is among the acknowledged ones, not the
	// open ones awaiting someone.
	step("see it acknowledged",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(`//section[@class="acked"]//tr[td/code[text()="refund:4821:approved-request-7"] and contains(., "`+reason+`")]`))
	openRows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll('section.severity td code')).filter(c => c.textContent === 'refund:4821:approved-request-7').length`))
	if err != nil {
		t.Fatalf("count the open rows: %v", err)
	}
	if openRows != 0 {
		t.Errorf("the acknowledged double refund is still among the open findings (%d rows)", openRows)
	}
}
